"""Command-line front ends: one module per command group, each with `add_parser(sub)` (its parsers set
`func`), listed in engine/__main__.py's CLI_MODULES. argparse lives here and in engine/__main__.py only;
flags shared by several commands are defined once in common.py."""
