"""Models and the pieces every decode step uses: loading, the LM wrapper, sampling, tree attention."""
