"""The multi-host test's hosts leave nothing behind, even when what runs on them fails (issue 13):
no namespace, no veth, no bridge. Needs root and ``ip``, as that test does."""

from __future__ import annotations

import subprocess

import pytest

from tests.deploy.netns import Hosts, ip


def test_hosts_are_removed_when_the_test_on_them_fails() -> None:
    hosts = Hosts(2)
    with pytest.raises(RuntimeError, match="the test failed"), hosts:
        hosts[0].cut()  # as the multi-host test fails at its worst: one link down
        assert len(hosts.leftovers()) == 5, "a bridge, two veth ends and two namespaces"
        raise RuntimeError("the test failed")
    assert hosts.leftovers() == []


def test_hosts_half_built_are_removed() -> None:
    """Building fails at the second host (its namespace's name is taken): the first host and the
    bridge go; the namespace this run did not make stays."""
    hosts = Hosts(2)
    ip("netns", "add", hosts[1].namespace)
    try:
        with pytest.raises(subprocess.CalledProcessError), hosts:
            pass
        (left,) = hosts.leftovers()
        assert left.split()[0] == hosts[1].namespace
    finally:
        ip("netns", "del", hosts[1].namespace, check=False)
    assert hosts.leftovers() == []
