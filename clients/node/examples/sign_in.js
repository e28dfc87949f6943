// sign_in.js: DATABASE_URL=postgres://web@localhost/app node sign_in.js (behind nginx on 127.0.0.1)
// Policies: sign_in_ip (100 an hour per client address), sign_in_failures (5 an hour per account).
const express = require('express');
const { RateLimiter, rateLimit } = require('ratelimit-client');

const limiter = new RateLimiter({ connectionString: process.env.DATABASE_URL });
const app = express();
app.use(express.urlencoded({ extended: false }));
// before the password check: the client address and the account, all or nothing; 429 when either refuses
app.post('/login', rateLimit(limiter, {
  trustedProxies: ['127.0.0.1'],
  limits: (req, ip) => [{ limiter: 'sign_in_ip', key: ip }, { limiter: 'sign_in_failures', key: String(req.body.email) }],
}), async (req, res) => {
  if (req.body.password !== 'right') return res.status(401).send('Wrong e-mail address or password\n');
  await limiter.refund('sign_in_failures', String(req.body.email));   // only failures count
  res.send('Signed in\n');
});
app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
