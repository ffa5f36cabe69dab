// The gateway's hand-built access-log line must be what pino writes for the same record: same
// fields, same order of the pino header, valid JSON whatever the client put in the URL.
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import {
  ACCESS_MESSAGE,
  type AccessLine,
  accessJson,
  accessRecord,
  LineBuffer,
} from '../../src/gateway/access-log.js'

function pinoLine(line: AccessLine, time: number): string {
  let out = ''
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      out += chunk.toString()
      done()
    },
  })
  pino({ level: 'info', timestamp: () => `,"time":${time}` }, sink).info(accessRecord(line), ACCESS_MESSAGE)
  return out
}

const base: AccessLine = {
  id: '4f1c2a9e-0d3b-4d6a-9a51-7c1f0e2b8d11',
  method: 'GET',
  url: '/x?y=1',
  remoteAddress: '127.0.0.1',
  statusCode: 200,
  responseTime: 1.5,
  route: 'default',
  upstreamStatus: 200,
  bytesIn: 0,
  bytesOut: 312,
  waitMs: 0,
  holdMs: 1.2,
  upstreamMs: 0.9,
  rejected: undefined,
  refused: undefined,
  upstreamError: undefined,
  aborted: undefined,
}

describe('accessJson()', () => {
  it.each([
    ['a plain request', base],
    [
      'an upstream error, refused and aborted',
      {
        ...base,
        statusCode: 499,
        upstreamStatus: undefined,
        upstreamMs: undefined,
        upstreamError: 'reset',
        refused: 'body_timeout',
        aborted: true as const,
      },
    ],
    [
      'a rejection without upstream',
      { ...base, statusCode: 503, upstreamStatus: undefined, rejected: 'timeout' },
    ],
    ['a request id that needs escaping', { ...base, id: 'a"b\\c' }],
    ['no method, URL or address', { ...base, method: undefined, url: undefined, remoteAddress: undefined }],
    ['quotes, backslashes and control characters in the URL', { ...base, url: '/"a"\\b\u0000\u001f\u007f' }],
    ['line and paragraph separators', { ...base, url: '/\u2028\u2029' }],
    ['a route name that needs escaping', { ...base, route: 'api "v2"' }],
  ])('writes %s byte for byte as pino does', (_name, line) => {
    const time = 1_795_000_000_000
    const ours = accessJson(line, time)
    expect(ours).toBe(pinoLine(line, time))
    expect(ours.endsWith('\n')).toBe(true)
    expect(ours.slice(0, -1)).not.toContain('\n')
    expect(JSON.parse(ours)).toMatchObject({ level: 30, msg: 'request completed', req: { id: line.id } })
  })

  it('escapes a lone surrogate (pino writes it raw, which UTF-8 turns into U+FFFD)', () => {
    const ours = accessJson({ ...base, url: '/\ud800' }, 1)
    expect(ours).toContain('"url":"/\\ud800"')
    expect(JSON.parse(ours).req.url).toBe('/\ud800')
  })
})

describe('LineBuffer', () => {
  it('writes nothing until the limit, then everything held, in order, as one string', () => {
    const writes: string[] = []
    const buffer = new LineBuffer((text) => writes.push(text), 10)
    buffer.push('aaaa\n')
    buffer.push('bbbb\n'.slice(0, 4))
    expect(writes).toEqual([])
    buffer.push('cc\n')
    expect(writes).toEqual(['aaaa\nbbbbcc\n'])
    buffer.flush()
    expect(writes).toHaveLength(1) // nothing held: no empty write
    buffer.push('d\n')
    buffer.flush()
    expect(writes).toEqual(['aaaa\nbbbbcc\n', 'd\n'])
  })
})
