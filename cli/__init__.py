"""The ``bayes-nea`` command line: a thin shell over library calls (see ``cli.main``)."""
