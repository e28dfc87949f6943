# signin.py: DATABASE_URL=postgresql://web@localhost/app python3 -m flask --app signin run --port 3000
import math
import os

import psycopg
from flask import Flask, request
from psycopg_pool import ConnectionPool

pool = ConnectionPool(os.environ["DATABASE_URL"], open=True, timeout=2,
                      kwargs={"autocommit": True, "prepare_threshold": None})
app = Flask(__name__)

@app.post("/login")
def login():
    email = request.form.get("email", "")
    xff = ", ".join(request.headers.getlist("X-Forwarded-For")) or None
    try:
        with pool.connection() as conn:
            # before the password check: the client address and the account, all or nothing
            allowed, retry_after = conn.execute(
                "SELECT allowed, retry_after FROM rl_take_all("
                " ARRAY['sign_in_ip', 'sign_in_failures'],"
                " ARRAY[rl_ip_key(rl_client_ip(%s::inet, %s)), %s])",
                (request.remote_addr, xff, email)).fetchone()
            if not allowed:
                return "Too many attempts\n", 429, {"Retry-After": str(math.ceil(retry_after))}
            if request.form.get("password") != "right":  # ... check the password
                return "Wrong e-mail address or password\n", 401
            # signed in: only failures count against the account
            conn.execute("SELECT rl_refund('sign_in_failures', %s)", (email,))
    except psycopg.Error as e:
        app.logger.error("rate limit: %s", e)  # fail closed
        return "Try again later\n", 503, {"Retry-After": "5"}
    return "Signed in\n"
