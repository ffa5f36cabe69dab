// A proxy library configured as its docs recommend for production: a keep-alive agent (without one,
// http-proxy sends `Connection: close` upstream and pays a TCP connection per request), and the error
// handler every proxy needs. The baseline the gateway is measured against.
//   node --import tsx bench/lib/bare-proxy.ts <http-proxy|http-proxy-3> <target>  -> "listening on <url>"
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import httpProxy from 'http-proxy'
import { createProxyServer } from 'http-proxy-3'

const [library, target] = process.argv.slice(2)
if ((library !== 'http-proxy' && library !== 'http-proxy-3') || !target) {
  process.stderr.write('usage: bare-proxy.ts <http-proxy|http-proxy-3> <target>\n')
  process.exit(2)
}

function onError(_error: Error, _req: http.IncomingMessage, res: http.ServerResponse | Socket): void {
  if (res instanceof http.ServerResponse) {
    if (!res.headersSent) res.writeHead(502)
    res.end()
  } else {
    res.destroy()
  }
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 })
let web: (req: http.IncomingMessage, res: http.ServerResponse) => void
if (library === 'http-proxy') {
  const proxy = httpProxy.createProxyServer({ target, agent })
  proxy.on('error', onError)
  web = (req, res) => proxy.web(req, res)
} else {
  const proxy = createProxyServer({ target, agent })
  proxy.on('error', onError)
  web = (req, res) => proxy.web(req, res)
}
const server = http.createServer(web).listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}\n`)
})
process.on('SIGTERM', () => process.exit(0))
