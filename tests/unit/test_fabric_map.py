"""The fabric map the controller loads agrees with the topology."""
import json

from topologies.spineleaf import SpineLeaf


def test_map_contents_default():
    f = SpineLeaf().build()
    m = json.loads(json.dumps(f.to_map()))      # JSON round trip: what the controller reads
    assert m["kind"] == "spineleaf" and m["version"] == 1
    assert m["params"]["oversubscription"] == 3.0
    assert len(m["switches"]) == 6 and len(m["hosts"]) == 24 and len(m["links"]) == 32
    sw = {s["name"]: s for s in m["switches"]}
    assert sw["leaf1"]["dpid"] == 0x20001 and sw["leaf1"]["layer"] == "leaf"
    assert [p["port"] for p in sw["leaf1"]["ports"]] == list(range(1, 9))
    assert [p["peer"] for p in sw["leaf1"]["ports"]] == ["h1", "h2", "h3", "h4", "h5", "h6", "spine1", "spine2"]
    assert all(p["rate_mbps"] == 10 for s in m["switches"] for p in s["ports"])
    assert [p["peer"] for p in sw["spine1"]["ports"]] == ["leaf1", "leaf2", "leaf3", "leaf4"]
    h1 = m["hosts"][0]
    assert h1 == {"name": "h1", "mac": "02:00:00:00:01:01", "ip": "10.1.0.1", "switch": "leaf1",
                  "switch_port": 1, "intf": "h1-eth0", "rate_mbps": 10}


def test_every_link_end_is_a_port():
    f = SpineLeaf(spines=3, leaves=2, hosts_per_leaf=2, uplinks_per_spine=2).build()
    m = f.to_map()
    ports = {(s["name"], p["port"]): p for s in m["switches"] for p in s["ports"]}
    for l in m["links"]:
        assert ports[(l["a"], l["a_port"])]["peer"] == l["b"]
        assert ports[(l["a"], l["a_port"])]["intf"] == l["a_intf"]
        if (l["b"], l["b_port"]) in ports:
            assert ports[(l["b"], l["b_port"])]["peer"] == l["a"]
    assert len(ports) == 2 * 2 + 2 * 3 * 2 * 2
