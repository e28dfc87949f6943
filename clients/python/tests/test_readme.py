"""The package README: the install line installs the package (py.typed with it),
and its programs run as printed, against the table store's cluster."""
import importlib
import os
import re
import shutil
import subprocess
import sys
import types
import uuid

import pytest

from conftest import dsn

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def programs():
    """The README's python blocks by the file their first line names."""
    text = open(os.path.join(PACKAGE, "README.md"), encoding="utf-8").read()
    return {re.match(r"# (\S+?)[:,]", block).group(1): block
            for block in re.findall(r"^```python\n(.*?)^```$", text, re.M | re.S)}


def load(name, monkeypatch):
    """The program as a module, with DATABASE_URL the cluster's and fresh limiter names."""
    monkeypatch.setenv("DATABASE_URL", dsn("table"))
    module = types.ModuleType("readme_" + name.removesuffix(".py"))
    module.__file__ = os.path.join(PACKAGE, "README.md")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    code = programs()[name]
    # names of this run, so that a second run of the suite starts full
    for limiter in ("auth_login", "login", "search", "api"):
        code = code.replace(f'"{limiter}"', f'"{limiter}_{module_run}"')
    exec(compile(code, name, "exec"), module.__dict__)  # noqa: S102
    return module


module_run = uuid.uuid4().hex[:8]


def test_install_line(tmp_path):
    """pip install of the folder (offline, Debian's setuptools) ships py.typed."""
    text = open(os.path.join(PACKAGE, "README.md"), encoding="utf-8").read()
    line = re.search(r"^pip install (\S+)$", text, re.M).group(1)
    assert line == "/path/to/ratelimit/clients/python"
    # a copy: the build leaves build/ and egg-info beside the sources
    copy = tmp_path / "python"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index",
                    "--no-deps", "--target", str(tmp_path / "site"), str(copy)],
                   check=True, cwd=tmp_path, capture_output=True)
    installed = tmp_path / "site" / "ratelimit_client"
    assert (installed / "py.typed").is_file() and (installed / "django.py").is_file()
    metadata = next((tmp_path / "site").glob("ratelimit_client-*.dist-info")) / "METADATA"
    assert "Requires-Python: >=3.10" in metadata.read_text().splitlines()


def test_pytest_without_a_database():
    """pytest run by hand, no RL_* variables: the cluster tests skip and say why."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RL_")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
                          "test_decisions.py", "test_django.py", "test_rate.py"],
                         cwd=HERE, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "RL_TABLE_DSN is not set: no database" in run.stdout
    assert re.search(r"\d+ passed, \d+ skipped", run.stdout) and "failed" not in run.stdout


def test_first_program(monkeypatch, capsys):
    load("first.py", monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    # 12 s, less the time the six calls took (a loaded machine's second)
    assert lines[:5] == [f"allowed, {n} left" for n in (4, 3, 2, 1, 0)]
    assert lines[5:] in (["denied, retry in 12 s"], ["denied, retry in 11 s"])


def test_flask(monkeypatch):
    app = load("app.py", monkeypatch).app
    client = app.test_client()
    answers = [client.post("/login", data={"email": "ada@example.com"}) for _ in range(6)]
    assert [r.status_code for r in answers] == [200] * 5 + [429]
    assert answers[5].json["error"] == "too many sign-ins" and answers[5].json["retry_after"] in (11, 12)
    assert answers[5].headers["Retry-After"] == "12" and "RateLimit" in answers[0].headers
    assert client.post("/login", data={"email": "bob@example.com"}).status_code == 200


def test_fastapi(monkeypatch):
    import asyncio

    import httpx
    app = load("main.py", monkeypatch).app

    async def main():
        # httpx's ASGI transport: a client at 127.0.0.1, in this event loop
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            return [await client.get("/search", params={"q": "x"}) for _ in range(31)]
    answers = asyncio.run(main())
    assert [r.status_code for r in answers] == [200] * 30 + [429]
    assert answers[0].json() == {"q": "x"} and answers[30].headers["retry-after"] == "2"


def test_django(monkeypatch):
    pytest.importorskip("django")
    importlib.import_module("test_django")  # Django's settings, with the middleware
    from django.test import Client, override_settings
    from django.urls import path
    views = load("views.py", monkeypatch)
    urls = types.ModuleType("readme_urls")
    urls.urlpatterns = [path("hello", views.hello)]
    sys.modules["readme_urls"] = urls
    with override_settings(ROOT_URLCONF="readme_urls"):
        answers = [Client().get("/hello", REMOTE_ADDR="192.0.2.200") for _ in range(101)]
    assert [r.status_code for r in answers] == [200] * 100 + [429]
    # 36 s, less the time the hundred calls took
    assert answers[0].json() == {"hello": "world"} and 30 <= int(answers[100]["Retry-After"]) <= 36
