// The gateway's hand-built access-log line must be what pino writes for the same record: same
// fields, same order of the pino header, valid JSON whatever the client put in the URL.
import { hostname } from 'node:os'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import {
  ACCESS_MESSAGE,
  type AccessLine,
  accessJson,
  accessRecord,
  LineBuffer,
} from '../../src/gateway/ops/access-log.js'

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

describe('LineBuffer.pushAccess()', () => {
  // A seeded generator: the same hostile lines on every run.
  let seed = 42
  const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31
  const pick = <T>(values: readonly T[]): T => values[Math.floor(next() * values.length)] as T
  const maybe = <T>(value: T): T | undefined => (next() < 0.3 ? undefined : value)
  const strings = [
    '',
    'a',
    '"',
    '\\',
    '\n',
    '\u0000',
    '\u007f',
    'é',
    '\u2028',
    '\ud800',
    '😀',
    '/x?y="1"',
    'GET',
    '127.0.0.1',
    '::ffff:10.0.0.1',
    'x'.repeat(20_000),
    '\u00ff'.repeat(5000),
  ]
  const numbers = [
    0,
    1,
    9,
    10,
    200,
    499,
    1.5,
    0.1,
    12_345.6,
    2 ** 31,
    2 ** 31 - 1,
    1e21,
    3.14159,
    -1,
    -0.5,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    1e-7,
    0.1 + 0.2,
  ]
  const randomLine = (): AccessLine => ({
    id: pick(strings) || 'id',
    method: maybe(pick(strings)),
    url: maybe(pick(strings)),
    remoteAddress: maybe(pick(strings)),
    statusCode: pick(numbers),
    responseTime: pick(numbers),
    route: pick(strings),
    upstreamStatus: maybe(pick(numbers)),
    bytesIn: pick(numbers),
    bytesOut: pick(numbers),
    waitMs: pick(numbers),
    holdMs: pick(numbers),
    upstreamMs: maybe(pick(numbers)),
    rejected: maybe(pick(strings)),
    refused: maybe(pick(strings)),
    upstreamError: maybe(pick(strings)),
    aborted: next() < 0.5 ? true : undefined,
  })

  it('writes the bytes of accessJson() for 5,000 hostile lines, batched with other lines, in order', () => {
    const writes: string[] = []
    const buffer = new LineBuffer((text) => writes.push(text), 16_000)
    let expected = ''
    for (let i = 0; i < 5000; i++) {
      const line = randomLine()
      const time = 1_795_000_000_000 + i
      expected += accessJson(line, time)
      buffer.pushAccess(line, time)
      if (i % 97 === 0) {
        buffer.push('{"msg":"another line"}\n')
        expected += '{"msg":"another line"}\n'
      }
    }
    buffer.flush()
    expect(writes.length).toBeGreaterThan(10)
    expect(writes.join('')).toBe(expected)
  })

  it('writes 5,000 hostile lines as JSON.stringify writes the same record in pino order', () => {
    let compared = 0
    for (let i = 0; i < 5000; i++) {
      const line = randomLine()
      const numbers = [line.statusCode, line.responseTime, line.upstreamStatus ?? 0, line.bytesIn]
      numbers.push(line.bytesOut, line.waitMs, line.holdMs, line.upstreamMs ?? 0)
      if (!numbers.every(Number.isFinite)) continue // JSON has no NaN or Infinity
      const time = 1_795_000_000_000 + i
      const record = { level: 30, time, pid: process.pid, hostname: hostname(), ...accessRecord(line) }
      expect(accessJson(line, time)).toBe(`${JSON.stringify({ ...record, msg: ACCESS_MESSAGE })}\n`)
      compared++
    }
    expect(compared).toBeGreaterThan(500)
  })

  it('writes a plain line byte for byte as pino does', () => {
    const writes: string[] = []
    const buffer = new LineBuffer((text) => writes.push(text), 16_000)
    buffer.pushAccess(base, 1_795_000_000_000)
    buffer.flush()
    expect(writes).toEqual([pinoLine(base, 1_795_000_000_000)])
  })
})
