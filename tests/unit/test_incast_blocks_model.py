"""The incast-blocks scenario keys (traffic.incast_mode, traffic.block_bytes, traffic.blocks,
traffic.duration_s in blocks mode, rounds[i].traffic, an incast's senders in any mode): typed, strict, every bad input refused
with the dotted key; a oneshot incast (the default) resolves exactly as before."""
import pytest
import yaml

from common.errors import ScenarioError
from experiments.model import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCKS
from experiments.scenario import validate


def _blocks(**traffic):
    return {"name": "b", "traffic": {"incast_mode": "blocks", **traffic}}


def test_oneshot_is_the_default_and_carries_no_block_keys():
    sc = validate({"name": "t"})
    assert sc.traffic.incast_mode == "oneshot"
    assert sc.traffic.block_bytes is None and sc.traffic.blocks is None
    assert sc.rounds[0].traffic == sc.traffic


def test_blocks_mode_fills_in_its_defaults_and_reads_back_equal():
    sc = validate(_blocks(senders=8))
    assert (sc.traffic.block_bytes, sc.traffic.blocks) == (DEFAULT_BLOCK_BYTES, DEFAULT_BLOCKS)
    assert validate(yaml.safe_load(yaml.safe_dump(sc.to_data(), sort_keys=False))) == sc


def test_duration_alone_repeats_blocks_until_it_has_passed():
    sc = validate(_blocks(duration_s=5))
    assert sc.traffic.duration_s == 5 and sc.traffic.blocks is None


def test_rounds_sweep_senders_and_block_size():
    sc = validate({**_blocks(senders=8, block_bytes=1000),
                   "rounds": [{"name": "n8"}, {"name": "n4", "traffic": {"senders": 4}},
                              {"name": "sru", "traffic": {"block_bytes": 256_000}}]})
    assert [(r.traffic.senders, r.traffic.block_bytes) for r in sc.rounds] == [(8, 1000), (4, 1000), (8, 256_000)]
    assert sc.rounds[0].traffic is sc.traffic
    assert validate(yaml.safe_load(yaml.safe_dump(sc.to_data(), sort_keys=False))) == sc


@pytest.mark.parametrize("transport", ["tcp", "udp", "roce"])
def test_a_oneshot_incast_sweeps_its_senders_over_rounds(transport):
    sc = validate({"name": "t", "traffic": {"pattern": "incast", "transport": transport, "senders": 8},
                   "rounds": [{"name": "n2", "traffic": {"senders": 2}}, {"name": "n8"},
                              {"name": "n12", "traffic": {"senders": 12}}]})
    assert [r.traffic.senders for r in sc.rounds] == [2, 8, 12]
    assert sc.rounds[1].traffic is sc.traffic
    assert validate(yaml.safe_load(yaml.safe_dump(sc.to_data(), sort_keys=False))) == sc


def test_a_round_takes_the_first_of_the_listed_sender_hosts():
    sc = validate({**_blocks(sender_hosts=["h7", "h8", "h9"]),
                   "rounds": [{"name": "two", "traffic": {"senders": 2}}, {"name": "all"}]})
    assert [r.traffic.sender_hosts for r in sc.rounds] == [["h7", "h8"], ["h7", "h8", "h9"]]
    assert [r.traffic.senders for r in sc.rounds] == [2, 3]
    assert validate(yaml.safe_load(yaml.safe_dump(sc.to_data(), sort_keys=False))) == sc


@pytest.mark.parametrize("data,key,words", [
    ({"name": "t", "traffic": {"incast_mode": "block"}}, "traffic.incast_mode", "oneshot or blocks"),
    ({"name": "t", "traffic": {"incast_mode": True}}, "traffic.incast_mode", "oneshot or blocks"),
    (_blocks(transport="udp"), "traffic.incast_mode", "kernel TCP"),
    (_blocks(transport="roce"), "traffic.incast_mode", "kernel TCP"),
    (_blocks(pattern="permutation"), "traffic.incast_mode", "incast pattern"),
    (_blocks(block_bytes=0), "traffic.block_bytes", ">= 1"),
    (_blocks(block_bytes=1.5), "traffic.block_bytes", "int"),
    (_blocks(block_bytes="64k"), "traffic.block_bytes", "int"),
    (_blocks(blocks=0), "traffic.blocks", ">= 1"),
    (_blocks(blocks=True), "traffic.blocks", "boolean"),
    (_blocks(duration_s=float("nan")), "traffic.duration_s", "finite"),
    (_blocks(senders=24), "traffic.senders", "23 other hosts"),
    ({"name": "t", "traffic": {"blocks": 3}}, "traffic.blocks", "incast_mode: blocks"),
    ({"name": "t", "traffic": {"block_bytes": 3}}, "traffic.block_bytes", "incast_mode: blocks"),
    ({"name": "t", "traffic": {"duration_s": 3}}, "traffic.duration_s", "incast_mode: blocks"),
    ({**_blocks(), "rounds": [{"name": "a", "traffic": {"senders": 24}}]}, "rounds[0].traffic.senders",
     "23 other hosts"),
    ({**_blocks(), "rounds": [{"name": "a"}, {"name": "b", "traffic": {"senders": 0}}]},
     "rounds[1].traffic.senders", ">= 1"),
    ({**_blocks(), "rounds": [{"name": "a", "traffic": {"block_bytes": -1}}]}, "rounds[0].traffic.block_bytes",
     ">= 1"),
    ({**_blocks(), "rounds": [{"name": "a", "traffic": {"receiver": "h2"}}]}, "rounds[0].traffic",
     "senders, block_bytes"),
    ({**_blocks(sender_hosts=["h7", "h8"]), "rounds": [{"name": "a", "traffic": {"senders": 3}}]},
     "rounds[0].traffic.senders", "sender_hosts lists 2"),
    ({"name": "t", "traffic": {"pattern": "permutation"}, "rounds": [{"name": "a", "traffic": {"senders": 3}}]},
     "rounds[0].traffic", "applies to an incast, not permutation"),
    ({"name": "t", "rounds": [{"name": "a", "traffic": {"block_bytes": 3}}]}, "rounds[0].traffic.block_bytes",
     "incast_mode: blocks"),
    ({"name": "t", "traffic": {"transport": "roce"}, "rounds": [{"name": "a", "traffic": {"senders": 24}}]},
     "rounds[0].traffic.senders", "23 other hosts"),
])
def test_bad_input_names_the_key(data, key, words):
    with pytest.raises(ScenarioError) as e:
        validate(data)
    assert e.value.key == key, str(e.value)
    assert words in str(e.value)
