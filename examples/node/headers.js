// headers.js: npm install pg; DATABASE_URL=postgres://web@localhost/app node headers.js
const http = require('http');
const { Pool } = require('pg');

const pool = new Pool({ connectionString: process.env.DATABASE_URL, connectionTimeoutMillis: 2000 });
pool.on('error', (err) => console.error('idle database connection:', err.message));

http.createServer(async (req, res) => {
  let d;
  try {
    ({ rows: [d] } = await pool.query(
      `SELECT d.allowed, rl_headers(d, 'api') AS headers
         FROM rl_take('api', rl_ip_key(rl_client_ip($1::inet, $2))) AS d`,
      [req.socket.remoteAddress, req.headers['x-forwarded-for'] ?? null]));
  } catch (err) {
    console.error('rate limit:', err.message);   // fail closed
    return res.writeHead(503, { 'Retry-After': '5' }).end('Try again later\n');
  }
  for (const [name, value] of Object.entries(d.headers)) res.setHeader(name, value);
  if (!d.allowed) return res.writeHead(429).end('Too many requests\n');
  res.end('ok\n');
}).listen(Number(process.env.PORT ?? 3000), '127.0.0.1');
