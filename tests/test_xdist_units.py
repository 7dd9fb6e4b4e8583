"""make test's units of work under xdist (tests/conftest.py): the cluster's tests one unit, every other module
(or class) one unit, so a module's fixtures start once. The scheduler is xdist's own LoadScopeScheduling with
this function as its scope."""

from __future__ import annotations

from tests.conftest import xdist_unit


def test_the_cluster_tests_are_one_unit_and_every_other_module_its_own():
    assert {xdist_unit(n) for n in ("tests/node/test_upgrade_on_node.py::test_a",
                                    "tests/operator/integration/test_sources.py::test_b[git]",
                                    "tests/operator/integration/test_helm.py::TestChart::test_c")} == {"cluster"}
    assert xdist_unit("tests/engine/test_mcp.py::test_search[auto]") == "tests/engine/test_mcp.py"
    assert xdist_unit("tests/engine/test_mcp.py::test_fetch") == "tests/engine/test_mcp.py"
    assert xdist_unit("tests/engine/test_x.py::TestThing::test_y[a-b]") == "tests/engine/test_x.py::TestThing"
    assert xdist_unit("tests/operator/test_plan.py::test_z") == "tests/operator/test_plan.py"  # not the cluster's
