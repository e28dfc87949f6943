# sign_in.py: apt-get install -y python3-flask python3-psycopg python3-psycopg-pool
# DATABASE_URL=postgres://web:change-me@localhost/app python3 sign_in.py
import math
import os

import psycopg
from flask import Flask, request
from psycopg_pool import ConnectionPool

# autocommit: rl_take runs as its own statement, not in a transaction block
# (the pool's connections would open one); prepare_threshold=None: no named
# prepared statements, which PgBouncer's transaction mode cannot keep
pool = ConnectionPool(os.environ["DATABASE_URL"], open=True, timeout=2,
                      kwargs={"autocommit": True, "prepare_threshold": None})
app = Flask(__name__)

@app.post("/login")
def login():
    # 5 sign-in attempts per minute per client address, burst 5
    xff = ", ".join(request.headers.getlist("X-Forwarded-For")) or None
    try:
        with pool.connection() as conn:
            allowed, retry_after = conn.execute(
                "SELECT allowed, retry_after FROM rl_take('auth_login',"
                " rl_ip_key(rl_client_ip(%s::inet, %s)), 5.0/60, 5)",
                (request.remote_addr, xff)).fetchone()
    except psycopg.Error as e:
        app.logger.error("rate limit: %s", e)  # fail closed: no decision, no sign-in
        return "Try again later\n", 503, {"Retry-After": "5"}
    if not allowed:
        return "Too many attempts\n", 429, {"Retry-After": str(math.ceil(retry_after))}
    # ... check the password
    return "checked\n"


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ.get("PORT", "3000")))
