# sign_in_fastapi.py: apt-get install -y python3-fastapi python3-uvicorn python3-multipart python3-psycopg
# DATABASE_URL=postgres://web:change-me@localhost/app PYTHONPATH=/path/to/ratelimit/clients/python/src python3 sign_in_fastapi.py
import logging
import os

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import PlainTextResponse
from ratelimit_client import RateLimitError
from ratelimit_client.aio import AsyncLimiter
from ratelimit_client.fastapi import RateLimit, client_ip

limiter = AsyncLimiter(os.environ["DATABASE_URL"])
app = FastAPI()
nginx = ["127.0.0.1"]  # the address it saw is the client's


async def email(request: Request) -> str:
    address = (await request.form()).get("email")
    if not address:
        raise HTTPException(400)
    return address


async def email_and_address(request: Request) -> str:  # the lockout's key: a stranger cannot lock the owner out
    return f"{await email(request)} {client_ip(request, nginx)}"


# the three policies, all or nothing: 429 when any refuses
# (None: the client address, behind the trusted proxies)
sign_in_limits = RateLimit(limiter, {"sign_in_ip": None, "sign_in_failures": email,
                                     "sign_in_lockout": email_and_address}, trusted=nginx)


# a client's error (a bad call, a privilege revoked): logged, and a plain 500
@app.exception_handler(RateLimitError)
async def client_error(request: Request, error: RateLimitError) -> PlainTextResponse:
    logging.getLogger("uvicorn.error").error("ratelimit: %s", error)
    return PlainTextResponse("Internal Server Error\n", status_code=500)


@app.post("/login", response_class=PlainTextResponse, dependencies=[Depends(sign_in_limits)])
async def login(request: Request, response: Response) -> str:
    if (await request.form()).get("password") != "right":  # ... check the password
        response.status_code = 401  # on the response that carries the RateLimit fields
        return "Wrong e-mail address or password\n"
    await limiter.refund("sign_in_failures", await email(request))  # signed in: only failures count
    await limiter.refund("sign_in_lockout", await email_and_address(request))
    return "Signed in\n"


if __name__ == "__main__":
    # proxy_headers off: the client decides which X-Forwarded-For entry to believe
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "3000")), proxy_headers=False)
