"""A peer process for test_nixl_peers.py, driven as vLLM's NixlConnector
drives a remote worker: KV memory of LAYERS layers x BLOCKS blocks, agent
metadata exchanged out of band (here JSON lines on stdin / stdout).

argv: agent name, "fill" (the blocks hold pattern(layer, block)) or "zero".
Prints {"md", "layers", "block", "blocks"} first, then one line per event:
{"notif": [sender, hex]} for every notification, {"push": id, "ok": bool}
after checking the blocks a push notification names. Commands (stdin):
{"cmd": "add", "md": hex}, {"cmd": "heartbeat", "to": name, "n": k},
{"cmd": "exit"}.
"""

import json
import queue
import sys
import threading

import numpy as np

from orbitte.nixl._api import nixl_agent, nixl_agent_config

LAYERS = 4
BLOCKS = 64
BLOCK = 4096


def pattern(layer, block):
    """The bytes block `block` of layer `layer` holds in a filled KV cache."""
    i = np.arange(BLOCK, dtype=np.uint32)
    return ((i * 7 + layer * 31 + block * 13 + (i >> 8)) % 251).astype(np.uint8)


def kv_cache(fill):
    layers = []
    for layer in range(LAYERS):
        a = np.zeros(BLOCKS * BLOCK, dtype=np.uint8)
        if fill:
            for b in range(BLOCKS):
                a[b * BLOCK:(b + 1) * BLOCK] = pattern(layer, b)
        layers.append(a)
    return layers


def addr(a):
    return a.__array_interface__["data"][0]


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    name, mode = sys.argv[1], sys.argv[2]
    agent = nixl_agent(name, nixl_agent_config(backends=["UCX"]))
    layers = kv_cache(mode == "fill")
    agent.register_memory(agent.get_reg_descs(
        [(addr(a), a.nbytes, 0, "") for a in layers], "DRAM"))
    out({"md": agent.get_agent_metadata().hex(), "layers": [addr(a) for a in layers],
         "block": BLOCK, "blocks": BLOCKS})
    cmds = queue.Queue()

    def read():
        for line in sys.stdin:
            cmds.put(json.loads(line))
        cmds.put({"cmd": "exit"})

    threading.Thread(target=read, daemon=True).start()
    while True:
        try:
            c = cmds.get(timeout=0.005)
        except queue.Empty:
            c = None
        if c is not None:
            if c["cmd"] == "exit":
                break
            if c["cmd"] == "add":
                out({"added": agent.add_remote_agent(bytes.fromhex(c["md"])).decode()})
            elif c["cmd"] == "heartbeat":
                for i in range(c["n"]):
                    agent.send_notif(c["to"], b"hb:%d" % i)
                out({"heartbeats": c["n"]})
        for sender, msgs in agent.get_new_notifs().items():
            for m in msgs:
                out({"notif": [sender, m.hex()]})
                if m.startswith(b"push:"):
                    # b"push:" id u32, count u32, count x (layer, src, dst) u32, padding
                    head = np.frombuffer(m, dtype="<u4", count=2, offset=5)
                    trip = np.frombuffer(m, dtype="<u4", count=int(head[1]) * 3,
                                         offset=13).reshape(-1, 3)
                    ok = all(np.array_equal(layers[lay][d * BLOCK:(d + 1) * BLOCK],
                                            pattern(lay, s)) for lay, s, d in trip.tolist())
                    out({"push": int(head[0]), "ok": bool(ok)})
    out({"bye": True})


if __name__ == "__main__":
    main()
