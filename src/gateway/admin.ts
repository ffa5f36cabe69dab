// The admin listener: /metrics (Prometheus), /healthz, /readyz. Loopback by default; nothing on it
// changes state.
import http from 'node:http'
import type { Logger as PinoLogger } from 'pino'
import type { GatewayMetrics } from './metrics.js'

export function createAdminServer(
  metrics: GatewayMetrics,
  ready: () => Promise<boolean>,
  logger: PinoLogger,
): http.Server {
  return http.createServer((req, res) => {
    route(req, res).catch((error: unknown) => {
      logger.error({ err: error }, 'admin request failed')
      if (!res.headersSent) text(res, 500, 'error\n')
    })
  })

  async function route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') return text(res, 405, 'method not allowed\n')
    if (path === '/metrics') {
      const body = await metrics.registry.metrics()
      res.writeHead(200, { 'content-type': metrics.registry.contentType })
      res.end(body)
      return
    }
    if (path === '/healthz') return text(res, 200, 'ok\n')
    if (path === '/readyz') return (await ready()) ? text(res, 200, 'ready\n') : text(res, 503, 'not ready\n')
    text(res, 404, 'not found\n')
  }
}

function text(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'text/plain; charset=utf-8',
    'content-length': Buffer.byteLength(body),
  })
  res.end(body)
}
