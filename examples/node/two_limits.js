// signin.js: npm install express@5 pg; DATABASE_URL=postgres://web@localhost/app node signin.js
const express = require('express');
const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.DATABASE_URL, connectionTimeoutMillis: 2000 });
pool.on('error', (err) => console.error('idle database connection:', err.message));

const app = express();
app.use(express.urlencoded({ extended: false }));
app.post('/login', async (req, res) => {
  const email = String(req.body.email ?? '');
  try {
    // before the password check: the client address and the account, all or nothing
    const { rows: [d] } = await pool.query(
      `SELECT allowed, retry_after FROM rl_take_all(ARRAY['sign_in_ip', 'sign_in_failures'],
              ARRAY[rl_ip_key(rl_client_ip($1::inet, $2)), $3])`,
      [req.socket.remoteAddress, req.headers['x-forwarded-for'] ?? null, email]);
    if (!d.allowed) {
      res.set('Retry-After', String(Math.ceil(d.retry_after)));
      return res.status(429).send('Too many attempts\n');
    }
    if (req.body.password !== 'right') {   // ... check the password
      return res.status(401).send('Wrong e-mail address or password\n');
    }
    // signed in: only failures count against the account
    await pool.query("SELECT rl_refund('sign_in_failures', $1)", [email]);
    res.send('Signed in\n');
  } catch (err) {
    console.error('rate limit:', err.message);   // fail closed
    res.status(503).set('Retry-After', '5').send('Try again later\n');
  }
});
app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
