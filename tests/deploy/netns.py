"""Test "hosts" as Linux network namespaces on one bridge, for the multi-host test.

    with Hosts(3) as hosts:
        hosts.gateway                  # the root namespace's address on the bridge
        hosts[0].address               # host 0's own address
        hosts[0].run(command)          # the prefix that runs a command on host 0, with its own hostname
        hosts[0].cut(); hosts[0].heal()   # its link down (a partition), then up again

Every name starts with ``jq`` and a tag unique to this run, so cleanup removes exactly what this
run made: the namespaces (which take their veth ends with them), then the bridge. Bridged traffic
needs no IP forwarding, so nothing of the machine's own configuration changes.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

import pytest

SUBNETS = ipaddress.IPv4Network("10.213.0.0/16")  # private, test-only: a /24 of it per run


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def require_root_and_ip() -> None:
    if shutil.which("ip") is None:
        pytest.skip("needs the `ip` command (iproute2) to build network namespaces")
    if os.geteuid() != 0:
        pytest.skip("needs root to build network namespaces (ip netns add, veth, a bridge)")
    if shutil.which("unshare") is None:
        pytest.skip("needs `unshare` (util-linux) to give each namespace its own hostname")


@dataclass
class Host:
    namespace: str
    hostname: str
    address: str
    link: str  # the root namespace's end of its veth pair, on the bridge

    def run(self) -> list[str]:
        """A command prefix: run inside the namespace, under a hostname of its own (a UTS namespace)."""
        return [
            "ip",
            "netns",
            "exec",
            self.namespace,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.hostname,
        ]

    def cut(self) -> None:
        ip("link", "set", self.link, "down")

    def heal(self) -> None:
        ip("link", "set", self.link, "up")


class Hosts:
    def __init__(self, count: int) -> None:
        require_root_and_ip()
        self.tag = f"jq{secrets.token_hex(2)}"
        self.bridge = f"{self.tag}br"
        self.subnet = self._free_subnet()
        addresses = list(self.subnet.hosts())
        self.gateway = str(addresses[0])
        self.hosts = [
            Host(f"{self.tag}h{i}", f"{self.tag}-host{i}", str(addresses[10 + i]), f"{self.tag}h{i}a")
            for i in range(count)
        ]
        self._made: list[Host] = []

    @staticmethod
    def _free_subnet() -> ipaddress.IPv4Network:
        """A /24 of SUBNETS that no interface here uses (another run of this test may hold one)."""
        lines = ip("-4", "-o", "addr", "show").stdout.splitlines()
        used = [ipaddress.ip_interface(line.split()[3]).network for line in lines]
        candidates = list(SUBNETS.subnets(new_prefix=24))
        start = secrets.randbelow(len(candidates))
        for subnet in candidates[start:] + candidates[:start]:
            if not any(subnet.overlaps(network) for network in used):
                return subnet
        pytest.skip("no free /24 in 10.213.0.0/16 for the test hosts")

    def __enter__(self) -> Hosts:
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            for host in self.hosts:
                ip("netns", "add", host.namespace)
                self._made.append(host)
                inside = f"{self.tag}h{self.hosts.index(host)}b"
                ip("link", "add", host.link, "type", "veth", "peer", "name", inside)
                ip("link", "set", inside, "netns", host.namespace)
                ip("link", "set", host.link, "master", self.bridge, "up")
                ip("-n", host.namespace, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", inside)
                ip("-n", host.namespace, "link", "set", inside, "up")
                ip("-n", host.namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def close(self) -> None:
        """Remove what this run made; a link left over if a namespace had gone already, too."""
        for host in self._made:
            ip("netns", "del", host.namespace, check=False)
            ip("link", "del", host.link, check=False)
        ip("link", "del", self.bridge, check=False)

    def leftovers(self) -> list[str]:
        names = ip("-o", "link", "show").stdout + ip("netns", "list").stdout
        return [line for line in names.splitlines() if self.tag in line]

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
