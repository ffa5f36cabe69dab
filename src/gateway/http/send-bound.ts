// nginx send_timeout for the responses the gateway writes itself (its 400s, 404s, 408s, 413s, 500s,
// rejections, 502s and 504s): a client that takes none of such a response for the send timeout is
// cut, as one that stops reading a proxied response is (proxy.ts). Without it, a client that never
// reads pins the connection for ever, and the permit of the request the response answers with it.
import type { ClientResponse } from './client.js'

/** After `res.end()`: if the client has not taken the whole response within `ms` of the response
 * owning the connection (a pipelined one waits for those ahead), destroy it; its 'close' then
 * releases whatever the request held. */
export function boundSend(res: ClientResponse, ms: number): void {
  if (res.writableFinished || res.destroyed) return
  let timer: NodeJS.Timeout | undefined
  const arm = () => {
    if (res.writableFinished || res.destroyed) return
    timer = setTimeout(() => res.destroy(), ms)
    res.once('finish', () => clearTimeout(timer))
    res.once('close', () => clearTimeout(timer))
  }
  if (res.socket) arm()
  else res.once('socket', arm)
}
