"""The test run's ``manage.py flush`` (``management/commands/flush.py``): a Django app only
config/test_settings.py installs, so that it overrides Django's own command in the test
process and nowhere else."""
