"""The certification suites: one ``test_<suite>.py`` per suite; each check is declared on its test with
``certify.registry.check``."""
