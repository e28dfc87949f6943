# headers.py: apt-get install python3-flask python3-psycopg python3-psycopg-pool
# DATABASE_URL=postgresql://web@localhost/app python3 -m flask --app headers run --port 3000
import os

import psycopg
from flask import Flask, request
from psycopg_pool import ConnectionPool

# autocommit: rl_take runs as its own statement, not in a transaction block
pool = ConnectionPool(os.environ["DATABASE_URL"], open=True, timeout=2,
                      kwargs={"autocommit": True})
app = Flask(__name__)

@app.get("/api")
def api():
    xff = ", ".join(request.headers.getlist("X-Forwarded-For")) or None
    try:
        with pool.connection() as conn:
            allowed, headers = conn.execute(
                "SELECT d.allowed, rl_headers(d, 'api') FROM rl_take('api',"
                " rl_ip_key(rl_client_ip(%s::inet, %s))) AS d",
                (request.remote_addr, xff)).fetchone()
    except psycopg.Error as e:
        app.logger.error("rate limit: %s", e)  # fail closed
        return "Try again later\n", 503, {"Retry-After": "5"}
    if not allowed:
        return "Too many requests\n", 429, headers
    return "ok\n", 200, headers
