# sign_in.py: a sign-in limited per client address and, counting only failures, per account.
# apt-get install python3-flask python3-psycopg; PYTHONPATH=clients/python/src
# DATABASE_URL=postgresql://web@127.0.0.1/app PORT=3000 python3 sign_in.py
import os

from flask import Flask, abort, request
from ratelimit_client import Limiter
from ratelimit_client.flask import client_ip, rate_limit

limiter = Limiter(os.environ["DATABASE_URL"])
app = Flask(__name__)


@app.post("/login")
@rate_limit(limiter, {"sign_in_ip": client_ip, "sign_in_failures": lambda: request.form.get("email") or abort(400)})
def login():
    if request.form.get("password") != "right":  # ... check the password
        return "Wrong e-mail address or password\n", 401
    limiter.refund("sign_in_failures", request.form["email"])  # signed in: only failures count
    return "Signed in\n"


if __name__ == "__main__":
    app.run("127.0.0.1", int(os.environ.get("PORT", "3000")))
