"""OTE_AUTH_KEY on one side only, from Python: opening the peer raises a
ConnectionError (AUTH) whose message points at OTE_AUTH_KEY, and the
engine's log (stderr) says which side lacks the key."""
import pytest

import orbitte

KEY = "py-auth-hint-key-0123456789abcdef"


def keyed_engine(monkeypatch, key):
    """An engine created with OTE_AUTH_KEY=key (None: without one)."""
    if key is None:
        monkeypatch.delenv("OTE_AUTH_KEY", raising=False)
    else:
        monkeypatch.setenv("OTE_AUTH_KEY", key)
    monkeypatch.delenv("OTE_AUTH_KEY_FILE", raising=False)
    try:
        return orbitte.Engine(listen_addr="127.0.0.1:0")
    except orbitte.UnsupportedError:
        pytest.skip("this build cannot authenticate (no libcrypto)")
    finally:
        monkeypatch.delenv("OTE_AUTH_KEY", raising=False)


@pytest.mark.parametrize("target_key, initiator_key, hint", [
    (KEY, None, "the peer requires OTE_AUTH_KEY and this engine has none"),
    (None, KEY, "the peer has no OTE_AUTH_KEY and this engine has one"),
])
def test_one_sided_key(monkeypatch, capfd, target_key, initiator_key, hint):
    with keyed_engine(monkeypatch, target_key) as target, \
            keyed_engine(monkeypatch, initiator_key) as initiator:
        capfd.readouterr()
        with pytest.raises(orbitte.ConnectionError) as ei:
            initiator.open(target.name)
        assert ei.value.status == orbitte.Status.AUTH
        assert "OTE_AUTH_KEY" in str(ei.value)
        log = capfd.readouterr().err
        lines = [line for line in log.splitlines() if hint in line]
        assert lines, log
        assert " error " in lines[0] or " warn " in lines[0]
