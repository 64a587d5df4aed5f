"""The certification suites: one ``test_<suite>.py`` per suite, each with its ``CHECKS`` declarations."""
