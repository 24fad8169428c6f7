"""Command-line front ends (argparse lives here and in engine/__main__.py only)."""
