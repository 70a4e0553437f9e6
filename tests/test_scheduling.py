"""Where pytest-xdist runs each test (tests/conftest.py ``pytest_xdist_make_scheduler``): a
``shared_server`` module's tests are one unit of work, so they run on one worker one after
another and share the module's server; every other test is a unit of its own. It subclasses
pytest-xdist's LoadGroupScheduling and replaces its private ``_split_scope``: checked here, so
an upgrade that changes either fails here."""
import inspect

from xdist.scheduler import LoadGroupScheduling

from tests import conftest

SHARED = "tests/e2e/test_keyless_cold_resume.py"  # pytestmark = [..., pytest.mark.shared_server]
APART = "tests/e2e/test_crash_windows.py"


def test_the_method_replaced_is_load_group_schedulings_split_of_a_node_id():
    assert list(inspect.signature(LoadGroupScheduling._split_scope).parameters) == ["self", "nodeid"]
    assert LoadGroupScheduling._split_scope(None, "a.py::t@group") == "group"


def test_a_shared_server_modules_tests_are_one_unit_and_the_others_each_their_own(pytestconfig):
    class Config:  # the run's config, as a controller's run with -n 2 --dist loadgroup
        def getvalue(self, name):
            return {"dist": "loadgroup", "tx": ["2*popen"]}.get(name) or pytestconfig.getvalue(name)

        def __getattr__(self, name):
            return getattr(pytestconfig, name)

    scheduler = conftest.pytest_xdist_make_scheduler(Config(), log=None)
    assert isinstance(scheduler, LoadGroupScheduling)
    assert {scheduler._split_scope(f"{SHARED}::test_{n}") for n in "ab"} == {SHARED}
    assert scheduler._split_scope(f"{SHARED}::test_c[x]") == SHARED
    assert scheduler._split_scope(f"{APART}::test_a") != scheduler._split_scope(f"{APART}::test_b")
