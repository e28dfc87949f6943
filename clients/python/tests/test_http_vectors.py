"""The client address rules replay test/vectors/client_ip.tsv, rl_client_ip's own vectors."""
import os

import pytest

from ratelimit_client import RateLimitError
from ratelimit_client.http import client_ip, client_ip_forwarded

TSV = os.path.join(os.path.dirname(__file__), "..", "..", "..", "test", "vectors", "client_ip.tsv")


def copy_text(field):
    """A field of COPY's text format."""
    if field == "\\N":
        return None
    return field.replace("\\t", "\t").replace("\\n", "\n").replace("\\\\", "\\")


def array(field):
    if field is None:
        return None
    inner = field.strip("{}")
    return [None if e == "NULL" else e for e in inner.split(",")] if inner else []


with open(TSV) as f:
    ROWS = [line.rstrip("\n").split("\t") for line in f if line.strip()]


@pytest.mark.parametrize("row", ROWS, ids=[r[5] for r in ROWS])
def test_client_ip_vector(row):
    fn, remote, header, trusted, answer, why = row
    walk = client_ip if fn == "rl_client_ip" else client_ip_forwarded
    args = (copy_text(remote), copy_text(header), array(copy_text(trusted)))
    if answer.startswith("ERROR"):
        with pytest.raises(RateLimitError) as e:
            walk(*args)
        assert e.value.sqlstate == answer.split()[1]
    else:
        got = walk(*args)
        assert (None if got is None else str(got)) == copy_text(answer), why
