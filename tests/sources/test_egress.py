"""Egress rules (finding 1 of the security review, and 13, 14 on the git side): a tenant's source URL, the
redirects it answers and the LLM probe never reach loopback, link-local (cloud metadata), private or
in-cluster addresses unless the operator's allowlist opens them; bodies that are not text are not
indexed; git neither follows redirects with credentials nor reads a ref as an option.

Real servers on loopback throughout: 127.0.0.1 is what the allowlist opens in these tests, 127.0.0.2 is
"another host" it does not (the secret a redirect points at)."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from ragengine_operator.kube.observe import _probe_cache, probe_llm
from ragengine_operator.net.egress import EgressPolicy, refusal
from ragengine_operator.net.http import Refused, request
from ragengine_operator.sources.engine import EngineClient
from ragengine_operator.sources.fetch import FetchError, fetch_git
from ragengine_operator.sources.git import GitCredentials
from ragengine_operator.sources.sync import FetchPolicy, fetch, sync_source
from ragengine_operator.spec.sources import Source
from tests.sources.test_git_sync import LOOPBACK, engine, held  # noqa: F401 - the engine fixture
from tests.support.git_server import Repo, git_http_server
from tests.support.web import send, web_server

CREDS = b'{"Code": "Success", "AccessKeyId": "ASIAEXAMPLE", "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG"}'
AUTH = ("reader", "S3CRET-TOKEN")


def ips(*text: str) -> list:
    return [ipaddress.ip_address(t) for t in text]


@pytest.mark.parametrize("host, addresses, why", [
    ("169.254.169.254", [], "link-local"),
    ("metadata.google.internal", ["169.254.169.254"], "link-local"),
    ("fd00:ec2::254", [], "link-local"),
    ("fe80::1", [], "link-local"),
    ("::ffff:169.254.169.254", [], "link-local"),
    ("64:ff9b::a9fe:a9fe", [], "link-local"),
    ("127.0.0.1", [], "loopback"),
    ("::1", [], "loopback"),
    ("10.0.0.12", [], "RFC 1918"),
    ("192.168.1.1", [], "RFC 1918"),
    ("fc00::1", [], "unique local"),
    ("100.64.0.1", [], "CGNAT"),
    ("0.0.0.0", [], "unspecified"),
    ("192.0.2.1", [], "not a public address"),
    ("b-engine.team-b.svc.cluster.local", ["10.96.0.10"], "in-cluster name"),
    ("kubernetes.default.svc", ["10.96.0.1"], "in-cluster name"),
    ("localhost", ["127.0.0.1"], "in-cluster name"),
    ("rebinding.example", ["93.184.216.34", "10.0.0.1"], "resolves to 10.0.0.1, which is private"),
    ("nowhere.example", [], "does not resolve"),
    ("docs.example.com", ["93.184.216.34"], None),
    ("2606:2800:220:1:248:1893:25c8:1946", [], None),
])
def test_default_rules(host, addresses, why):
    try:
        answer = ips(*addresses) or ips(host)  # an address literal is its own answer
    except ValueError:
        answer = []  # a name that does not resolve
    found = refusal(host, answer, EgressPolicy())
    assert (found is None) if why is None else (why in (found or "")), found


@pytest.mark.parametrize("host, why", [
    ("::127.0.0.1", "IPv4-compatible"),  # ::/96: loopback carried the deprecated way
    ("::a9fe:a9fe", "IPv4-compatible"),  # ... and cloud metadata
    ("::ffff:0:7f00:1", "IPv4-translated"),  # ::ffff:0:0:0/96 (SIIT), not ::ffff:0:0/96 (mapped)
    ("::ffff:0:a9fe:a9fe", "IPv4-translated"),
    ("64:ff9b:1::7f00:1", "local-use NAT64"),  # 64:ff9b:1::/48: the IPv4 address where the gateway's prefix puts it
    ("64:ff9b:1:7f00:1::", "local-use NAT64"),
    ("64:ff9b:1::a9fe:a9fe", "local-use NAT64"),
    ("fec0::1", "site-local"),  # fec0::/10, deprecated but still routed by some networks
    ("4000::1", "not a public address"),  # anything else outside global unicast (2000::/3)
])
def test_ipv6_forms_that_carry_ipv4_or_are_not_global_unicast_are_refused(host, why):
    """Issue 41, finding 6: Python's is_global calls each of these public; each is refused by name, as a literal
    and as what a name resolves to, and never contacted."""
    assert why in (refusal(host, ips(host), EgressPolicy()) or ""), host
    assert why in (refusal("rebinding.example", ips("93.184.216.34", host), EgressPolicy()) or ""), host
    with pytest.raises(Refused, match=f"refused by the egress policy: .*{why}"):
        request("GET", f"http://[{host}]:8080/latest/meta-data/", timeout_s=5, max_bytes=1024, policy=EgressPolicy())


def test_the_allowlist_opens_ranges_and_names_but_not_the_cluster_ranges():
    policy = EgressPolicy.build(["10.20.0.0/16", "git.internal.example", "*.corp.example"],
                                cluster_cidrs=["10.20.128.0/17"])
    assert refusal("10.20.1.2", ips("10.20.1.2"), policy) is None
    assert "10.20.0.0" not in (refusal("10.21.1.2", ips("10.21.1.2"), policy) or "")  # outside: refused
    assert "Service or Pod range" in refusal("10.20.200.1", ips("10.20.200.1"), policy)  # inside an allowed CIDR
    assert refusal("git.internal.example", ips("10.99.0.1"), policy) is None  # a name opens whatever it resolves to
    assert refusal("wiki.corp.example", ips("192.168.0.9"), policy) is None
    assert "RFC 1918" in refusal("corp.example", ips("192.168.0.9"), policy)  # *.x is subdomains only
    assert refusal("engine.team-b.svc.cluster.local", ips("10.20.200.1"), policy)  # names: the name rule first


def test_redirects_to_metadata_and_to_other_loopback_hosts_are_refused(engine, tmp_path):  # noqa: F811
    with web_server({"/creds": (200, {"Content-Type": "text/plain"}, CREDS)}, host="127.0.0.2") as secret:
        hops = {
            "/imds": "http://169.254.169.254/latest/meta-data/iam/security-credentials/node-role",
            "/other-host": secret.url("/creds"),
            "/by-name": secret.url("/creds").replace("127.0.0.2", "localhost"),
            "/ipv6": "http://[::ffff:127.0.0.2]:1/creds",
            "/file": "file:///etc/passwd",
        }
        routes = {path: (302, {"Location": where}, b"") for path, where in hops.items()}
        routes["/ok.txt"] = (200, {"Content-Type": "text/plain"}, b"A public page.")
        with web_server(routes) as front:
            reasons = {
                "/imds": "169.254.169.254 is link-local", "/other-host": "127.0.0.2 is loopback",
                "/by-name": "host localhost is a local or in-cluster name", "/ipv6": "is loopback",
                "/file": "a redirect to file:// is not followed",
            }
            for path, why in reasons.items():
                source = Source.model_validate({"name": "loot", "index": "loot",
                                                "http": {"urls": [front.url("/ok.txt"), front.url(path)]}})
                client = EngineClient(engine)
                try:
                    result = sync_source(source, client, lambda s=source: fetch(
                        s, cache=tmp_path, secret=None, previous_revision=None, previous_validators=None, policy=LOOPBACK))
                finally:
                    client.close()
                assert not result.ok and why in result.message, (path, result.message)
                assert "redirected to" in result.message or path == "/file", result.message
            direct = Source.model_validate({"name": "loot", "http": {"urls": [secret.url("/creds")]}})
            with pytest.raises(FetchError, match=r"refused by the egress policy: 127\.0\.0\.2 is loopback"):
                fetch(direct, cache=tmp_path, secret=None, previous_revision=None, previous_validators=None, policy=LOOPBACK)
        assert secret.seen == []  # never contacted
    assert httpx.get(f"{engine}/indexes/loot/documents").status_code == 404  # nothing indexed


def test_only_text_and_document_types_are_indexed(engine, tmp_path):  # noqa: F811
    routes = {
        "/latest/meta-data/iam/security-credentials/node-role": (200, {"Content-Type": "application/json"}, CREDS),
        "/api/v1/pods": (200, {}, b'{"items": []}'),  # no content type, no suffix
        "/notes": (200, {"Content-Type": "text/plain; charset=utf-8"}, b"Plain notes without a suffix."),
        "/page": (200, {"Content-Type": "text/html"}, b"<html><body><p>A page.</p></body></html>"),
        "/guide.md": (200, {"Content-Type": "application/octet-stream"}, b"# Guide\n\nBy its suffix.\n"),
        "/tool.py": (200, {"Content-Type": "text/plain"}, b"def main():\n    return 1\n"),
    }
    with web_server(routes) as site:
        source = Source.model_validate({"name": "web", "index": "web", "http": {"urls": [site.url(p) for p in routes]}})
        client = EngineClient(engine)
        try:
            result = sync_source(source, client, lambda: fetch(source, cache=tmp_path, secret=None, previous_revision=None,
                                                               previous_validators=None, policy=LOOPBACK))
        finally:
            client.close()
    assert result.ok and result.documents == 4 and result.skipped == 2, result.message
    assert "content type application/json is not text or a document type" in result.message, result.message
    docs = held(engine, "web")
    assert set(docs) == {f"web:{site.url(p)}" for p in ("/notes", "/page", "/guide.md", "/tool.py")}
    assert docs[f"web:{site.url('/tool.py')}"]["metadata"]["language"] == "python"
    assert docs[f"web:{site.url('/page')}"]["text"] == "A page."


def test_the_connection_goes_to_the_checked_address_with_the_name_as_host(tmp_path):
    with web_server({"/notes": (200, {"Content-Type": "text/plain"}, b"Notes.")}) as site:
        by_name = site.url("/notes").replace("127.0.0.1", "localhost")
        named = FetchPolicy(egress=EgressPolicy.build(["localhost"]))
        got = fetch(Source.model_validate({"name": "n", "http": {"urls": [by_name]}}), cache=tmp_path, secret=None,
                    previous_revision=None, previous_validators=None, policy=named)
        assert [f.text for f in got.files] == ["Notes."]
        assert site.seen[-1][1]["host"] == by_name.split("/")[2]  # "localhost:PORT", sent to 127.0.0.1


def test_git_urls_are_checked_before_git_runs(tmp_path):
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("a.md", "Alpha.")
    repo.commit("one")
    seen: list[dict] = []
    with git_http_server(root, host="127.0.0.2", seen=seen) as other:
        for url, why in [
            (f"{other}/docs.git", "127.0.0.2 is loopback"),
            ("http://169.254.169.254/latest/x.git", "link-local"),
            ("https://kubernetes.default.svc/x.git", "local or in-cluster name"),
            ("https://engine.team-b.svc.cluster.local/x.git", "local or in-cluster name"),
            ("git@10.0.0.1:org/repo.git", "RFC 1918"),
            ("ssh://git@[::1]:2222/org/repo.git", "loopback"),
        ]:
            with pytest.raises(FetchError, match="refused by the egress policy") as refused:
                fetch_git(url, "main", ["**"], tmp_path / "cache", policy=LOOPBACK.egress)
            assert why in str(refused.value), str(refused.value)
    assert seen == []


def test_git_credentials_never_follow_a_redirect_to_another_host(tmp_path):
    """Server A (127.0.0.1) redirects the repository to server B (127.0.0.2), which wants the same Basic
    credentials: both are allowlisted, so only git's own redirect handling is under test."""
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("a.md", "Alpha.")
    repo.commit("one")
    seen: list[dict] = []
    both = EgressPolicy.build(["127.0.0.1/32", "127.0.0.2/32"])
    with git_http_server(root, auth=AUTH, host="127.0.0.2", seen=seen) as b:
        def redirect(handler) -> None:
            send(handler, 302, {"Location": b + handler.path}, b"")

        with web_server({"/docs.git/info/refs": redirect}) as a:
            creds = GitCredentials(username=AUTH[0], password=AUTH[1])
            with pytest.raises(FetchError, match="redirect, which is not followed"):
                fetch_git(a.url("/docs.git"), "main", ["**"], tmp_path / "cache", creds, policy=both)
            assert a.seen and a.seen[0][1].get("authorization", "").startswith("Basic ")  # A is the URL: it may
        assert [h for h in seen if "authorization" in h] == []  # B never saw the credentials
        direct = fetch_git(f"{b}/docs.git", "main", ["**"], tmp_path / "cache-b", creds, policy=both)
        assert [f.path for f in direct.files] == ["a.md"]  # the same credentials work at B's own URL


def test_a_ref_is_never_an_option(tmp_path):
    with pytest.raises(ValueError, match="not starting with '-'"):
        Source.model_validate({"name": "x", "git": {"url": "https://git.example/r.git",
                                                    "ref": "--upload-pack=touch /tmp/pwned"}})
    root = tmp_path / "git"
    root.mkdir()
    repo = Repo(root)
    repo.write("a.md", "Alpha.")
    repo.commit("one")
    with git_http_server(root) as base, pytest.raises(FetchError) as failed:
        fetch_git(f"{base}/docs.git", "--bogus-option", ["**"], tmp_path / "cache", policy=LOOPBACK.egress)
    assert "ref not found" in str(failed.value) and "unknown option" not in str(failed.value), str(failed.value)


def test_the_llm_probe_obeys_the_egress_rules():
    models = (200, {"Content-Type": "application/json"}, b'{"data": [{"id": "served"}]}')
    with web_server({"/v1/models": models}, host="127.0.0.2") as internal:
        _probe_cache.clear()
        assert probe_llm(internal.url("/v1"), "served") is None  # refused: not probed, nothing claimed
        assert probe_llm(internal.url("/v1"), "other") is None
        assert internal.seen == []
    with web_server({"/v1/models": models}) as allowed:
        _probe_cache.clear()
        assert probe_llm(allowed.url("/v1"), "served", LOOPBACK.egress) is None
        assert "does not serve model 'other'" in probe_llm(allowed.url("/v1"), "other", LOOPBACK.egress)
        assert len(allowed.seen) == 2
    _probe_cache.clear()
