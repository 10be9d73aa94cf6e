"""The central metadata server of NIXL's API: etcd, through its v3 JSON gateway.

NIXL_ETCD_ENDPOINTS lists the endpoints ("http://h:p" or "h:p", comma
separated, tried in turn); NIXL_ETCD_NAMESPACE is the key prefix (default
"/nixl/agents/"). An agent's metadata blob is stored under
<namespace><agent name>/<label> ("main" for the full metadata). Values are
the signed blobs of _md.py: what is read back is checked like any blob.
"""

import base64
import json
import os
import urllib.error
import urllib.request

TIMEOUT_S = 2.0


class EtcdError(Exception):
    """No endpoint answered, or one answered with an error."""


def endpoints():
    raw = os.environ.get("NIXL_ETCD_ENDPOINTS", "")
    out = []
    for e in raw.split(","):
        e = e.strip().rstrip("/")
        if not e:
            continue
        if "://" not in e:
            e = "http://" + e
        out.append(e)
    return out


def namespace():
    ns = os.environ.get("NIXL_ETCD_NAMESPACE", "") or "/nixl/agents/"
    return ns if ns.endswith("/") else ns + "/"


def key(agent, label=""):
    return f"{namespace()}{agent}/{label or 'main'}"


def _b64(b):
    return base64.b64encode(b).decode()


def _call(path, body):
    eps = endpoints()
    if not eps:
        raise EtcdError("NIXL_ETCD_ENDPOINTS is not set")
    why = []
    for ep in eps:
        req = urllib.request.Request(ep + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
                data = r.read(64 << 20)
            return json.loads(data or b"{}")
        except (OSError, urllib.error.URLError, ValueError) as e:
            why.append(f"{ep}: {e}")
    raise EtcdError("; ".join(why))


def put(k, value):
    _call("/v3/kv/put", {"key": _b64(k.encode()), "value": _b64(value)})


def get(k):
    """The value under k, or None."""
    r = _call("/v3/kv/range", {"key": _b64(k.encode())})
    kvs = r.get("kvs") or []
    if not isinstance(kvs, list) or not kvs or not isinstance(kvs[0], dict):
        return None
    try:
        return base64.b64decode(kvs[0].get("value", ""), validate=True)
    except (ValueError, TypeError):
        raise EtcdError("etcd answered a value that is not base64") from None


def delete_prefix(prefix):
    p = prefix.encode()
    end = p[:-1] + bytes([p[-1] + 1]) if p and p[-1] < 255 else b"\0"
    _call("/v3/kv/deleterange", {"key": _b64(p), "range_end": _b64(end)})
