// The response header list the proxy hands to res.writeHead(): hop-by-hop and Connection-named headers
// never reach the client, the gateway's defaults fill only what the upstream did not keep, and extra
// headers replace the upstream's.
import { describe, expect, it } from 'vitest'
import { clientResponseHeaderList } from '../../src/gateway/http/headers.js'

const pairs = (list: (string | string[])[]) => {
  const out: [string, string | string[]][] = []
  for (let i = 0; i < list.length; i += 2) out.push([list[i] as string, list[i + 1] as string | string[]])
  return out
}

describe('clientResponseHeaderList', () => {
  it('drops hop-by-hop headers and those the Connection header names', () => {
    const list = clientResponseHeaderList(
      {
        'content-type': 'text/plain',
        connection: 'keep-alive, x-secret',
        'keep-alive': 'timeout=5',
        'transfer-encoding': 'chunked',
        'x-secret': 'internal',
        'set-cookie': ['a=1', 'b=2'],
        upgrade: 'h2c',
      },
      undefined,
      undefined,
    )
    expect(pairs(list)).toEqual([
      ['content-type', 'text/plain'],
      ['set-cookie', ['a=1', 'b=2']],
    ])
  })

  it("adds defaults only where the upstream kept none, and lets extra headers replace the upstream's", () => {
    const list = clientResponseHeaderList(
      { ratelimit: '"up";r=1', 'x-hidden': 'v', connection: 'x-hidden', 'content-length': '2' },
      { ratelimit: '"gw";r=5', 'ratelimit-policy': '"gw";q=10', 'x-hidden': 'ours', 'x-request-id': 'id1' },
      { 'content-length': '2', connection: 'close' },
    )
    expect(pairs(list)).toEqual([
      ['ratelimit', '"up";r=1'],
      ['ratelimit-policy', '"gw";q=10'],
      ['x-hidden', 'ours'], // the upstream's was Connection-named, so dropped: ours fills in
      ['x-request-id', 'id1'],
      ['content-length', '2'],
      ['connection', 'close'],
    ])
  })

  it('never takes a header name for an inherited property', () => {
    const list = clientResponseHeaderList({ constructor: 'x', tostring: 'y' }, { constructor: 'z' }, {})
    expect(pairs(list)).toEqual([
      ['constructor', 'x'],
      ['tostring', 'y'],
    ])
  })
})
