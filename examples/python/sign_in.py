# sign_in.py: apt-get install -y python3-flask python3-psycopg
# DATABASE_URL=postgres://web:change-me@localhost/app PYTHONPATH=/path/to/ratelimit/clients/python/src python3 sign_in.py
import os

from flask import Flask, abort, request
from ratelimit_client import Limiter
from ratelimit_client.flask import RateLimitExceeded, client_ip, rate_limit

limiter = Limiter(os.environ["DATABASE_URL"])
app = Flask(__name__)
nginx = ["127.0.0.1"]  # the address it saw is the client's


def email():
    return request.form.get("email") or abort(400)


def email_and_address():  # the lockout's key: a stranger cannot lock the owner out
    return f"{email()} {client_ip(nginx)}"


@app.errorhandler(RateLimitExceeded)  # a denial: 429 with Retry-After and the RateLimit fields
def too_many(e):
    return "Too many sign-ins: try again later\n", 429, e.headers


@app.post("/login")
# the three policies, all or nothing: 429 when any refuses
# (None: the client address, behind the trusted proxies)
@rate_limit(limiter, {"sign_in_ip": None, "sign_in_failures": email,
                      "sign_in_lockout": email_and_address}, trusted=nginx)
def login():
    if request.form["password"] != "right":  # ... check the password
        return "Wrong e-mail address or password\n", 401
    limiter.refund("sign_in_failures", email())  # signed in: only failures count
    limiter.refund("sign_in_lockout", email_and_address())
    return "Signed in\n"


if __name__ == "__main__":
    app.run("127.0.0.1", int(os.environ.get("PORT", "3000")))
