import pytest

from openhood.cli import main
from openhood.loadtest.target import RemoteTargetError, check_target, is_loopback, parse_target


def test_base_url_gets_the_embeddings_path_and_readiness_url():
    t = parse_target("http://127.0.0.1:8000")
    assert t.url == "http://127.0.0.1:8000/v1/embeddings"
    assert t.ready_url == "http://127.0.0.1:8000/health/ready"
    assert (t.host, t.port) == ("127.0.0.1", 8000)
    assert parse_target("http://127.0.0.1:9/custom/embed").url == "http://127.0.0.1:9/custom/embed"


@pytest.mark.parametrize("bad", ["127.0.0.1:8000", "ftp://127.0.0.1/", "http://"])
def test_bad_urls_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_target(bad)


@pytest.mark.parametrize(
    "addr,expected",
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("192.168.1.1", False),
        ("8.8.8.8", False),
        ("::2", False),
    ],
)
def test_loopback_classification(addr, expected):
    assert is_loopback(addr) is expected


def test_remote_targets_are_refused_unless_allowed():
    # Literal IPs resolve without DNS, so this never touches the network.
    target = parse_target("http://10.1.2.3:8000")
    with pytest.raises(RemoteTargetError, match="--allow-remote"):
        check_target(target)
    assert check_target(target, allow_remote=True) == ["10.1.2.3"]
    assert check_target(parse_target("http://localhost:8000"))  # loopback name is fine
    assert check_target(parse_target("http://[::1]:8000")) == ["::1"]


def test_cli_refuses_remote_target_before_sending_anything(capsys):
    rc = main(["loadtest", "http://192.0.2.10:8000", "--rate", "5", "--duration", "1"])
    assert rc == 2
    assert "only loopback" in capsys.readouterr().err
