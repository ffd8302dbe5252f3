"""Where a run's ranks meet: the interface holding the node's Ray address, an operator's choice, or the job's own."""

from __future__ import annotations

import pytest

from pcs_ray.executors import rendezvous


@pytest.fixture
def node_at(monkeypatch):
    def at(address: str):
        monkeypatch.setattr(rendezvous.ray.util, "get_node_ip_address", lambda: address)
    for name in (*rendezvous.SOCKET_VARIABLES, rendezvous.IFNAME_ENV):
        monkeypatch.setenv(name, "x")  # recorded, so what pick_interfaces sets is undone after the test
        monkeypatch.delenv(name)
    return at


def test_the_interface_holding_the_nodes_address_is_chosen(node_at, monkeypatch):
    node_at("127.0.0.1")
    assert rendezvous.interface_of("127.0.0.1") == "lo"
    assert rendezvous.pick_interfaces() == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
    import os

    assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"


def test_the_jobs_own_setting_wins_and_the_operators_comes_next(node_at, monkeypatch):
    node_at("127.0.0.1")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    monkeypatch.setenv(rendezvous.IFNAME_ENV, "ib0")
    assert rendezvous.pick_interfaces() == {"NCCL_SOCKET_IFNAME": "ib0"}


def test_an_address_no_interface_holds_sets_nothing(node_at):
    node_at("203.0.113.77")
    assert rendezvous.interface_of("203.0.113.77") is None
    assert rendezvous.pick_interfaces() == {}
