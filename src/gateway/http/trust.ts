// Who the client is, behind proxies the operator trusts (Express's `trust proxy`, nginx's
// set_real_ip_from with real_ip_recursive on): X-Forwarded-For is read from the right, and each
// address is believed only while the hop that wrote it is trusted. proxy-addr does the parsing and
// the address matching, as in Express.
import proxyaddr from 'proxy-addr'
import type { GatewayConfig, TrustProxy } from '../config/types.js'
import type { ClientRequest } from './client.js'

/** A config's trust, compiled once. */
export interface Trust {
  /** The client's address: the TCP peer's, or, through trusted proxies, the first untrusted entry of
   * X-Forwarded-For from the right. */
  clientAddress(req: ClientRequest): string | undefined
  /** The TCP peer is a trusted proxy: its X-Forwarded-* headers are kept and extended. */
  peerTrusted(req: ClientRequest): boolean
}

const NOBODY: Trust = {
  clientAddress: (req) => req.socket.remoteAddress,
  peerTrusted: () => false,
}

const compiled = new WeakMap<GatewayConfig, Trust>()

/** The trust of a config (compiled on first use; a reload brings a new config, so a new trust). */
export function trustOf(config: Pick<GatewayConfig, 'trustProxy'> & object): Trust {
  const setting = config.trustProxy
  if (setting === false) return NOBODY
  let trust = compiled.get(config as GatewayConfig)
  if (!trust) compiled.set(config as GatewayConfig, (trust = compileTrust(setting)))
  return trust
}

/** A number: that many proxies in front of the gateway (hop 0 is the TCP peer). A list: the
 * addresses and CIDR ranges of trusted proxies (and proxy-addr's names `loopback`, `linklocal`,
 * `uniquelocal`). Throws TypeError naming a bad entry. */
export function compileTrust(setting: Exclude<TrustProxy, false>): Trust {
  const trusts: (address: string, hop: number) => boolean =
    typeof setting === 'number' ? (_address, hop) => hop < setting : proxyaddr.compile([...setting])
  return {
    clientAddress(req) {
      const forwarded = req.headers['x-forwarded-for']
      if (forwarded === undefined) return req.socket.remoteAddress
      // Repeated header lines are one list, in order (as Node joins them).
      const headers = { 'x-forwarded-for': Array.isArray(forwarded) ? forwarded.join(', ') : forwarded }
      return proxyaddr({ socket: req.socket, headers } as never, trusts)
    },
    peerTrusted(req) {
      const peer = req.socket.remoteAddress
      return peer !== undefined && trusts(peer, 0)
    },
  }
}
