// G13: the canonical request target (RFC 3986 §5.2.4 dot segments, §6.2.2 case and percent-encoding
// normalisation; RFC 9112 §3.2 request-target forms), as the gateway routes, locks and forwards it.
import { describe, expect, it } from 'vitest'
import { canonicalTarget, isCanonicalPrefix, normalizeHost } from '../../src/gateway/http/target.js'

const path = (raw: string, method = 'GET', options?: Parameters<typeof canonicalTarget>[2]) => {
  const target = canonicalTarget(raw, method, options)
  return target.kind === 'path' ? `${target.path}${target.query}` : target.kind
}

describe('G13: canonical request target', () => {
  it.each([
    ['/export/a', '/export/a'],
    ['/health/../export/a', '/export/a'],
    ['/health/%2e%2e/export/a', '/export/a'],
    ['/x/.%2E/export/a', '/export/a'],
    ['/../../export/a', '/export/a'], // never above the root
    ['//export//a', '/export/a'],
    ['/export/./a/.', '/export/a/'],
    ['/export/a/..', '/export/'],
    ['/%65xport/%7e%2D', '/export/~-'], // unreserved escapes decoded
    ['/a%3fb%2a', '/a%3Fb%2A'], // others kept, hex upper-cased
    ['/export/a?x=/../y#', 'invalid'],
    ['/export/a?x=/../y', '/export/a?x=/../y'], // the query is not a path
    ['http://Gw:80/export/a?q', '/export/a?q'],
    ['HTTPS://gw', '/'],
    ['/export#x', 'invalid'],
    ['/health\\..\\export/a', 'invalid'],
    ['/export%2Fa', 'invalid'],
    ['/export%5ca', 'invalid'],
    ['/export/%zz', 'invalid'],
    ['/export/%4', 'invalid'],
    ['export/a', 'invalid'],
    ['http://user@gw/export', 'invalid'],
    ['*', 'invalid'],
  ])('%s -> %s', (raw, expected) => {
    expect(path(raw)).toBe(expected)
  })

  it('OPTIONS * is the asterisk form; other methods may not use it', () => {
    expect(canonicalTarget('*', 'OPTIONS').kind).toBe('asterisk')
    expect(canonicalTarget('*', 'GET').kind).toBe('invalid')
  })

  it('keeps encoded slashes encoded with escapedSlashes: keep, and repeated slashes without mergeSlashes', () => {
    expect(path('/a%2fb', 'GET', { escapedSlashes: 'keep', mergeSlashes: true })).toBe('/a%2Fb')
    expect(path('/a//b/../c', 'GET', { escapedSlashes: 'reject', mergeSlashes: false })).toBe('/a//c')
    expect(path('/a//b', 'GET', { escapedSlashes: 'reject', mergeSlashes: false })).toBe('/a//b')
  })

  it('matches on the path without ; parameters (Tomcat and Spring route without them), forwards them', () => {
    const target = canonicalTarget('/export;jsessionid=1/a;v=2?x', 'GET')
    expect(target).toMatchObject({
      kind: 'path',
      path: '/export;jsessionid=1/a;v=2',
      match: '/export/a',
      query: '?x',
    })
  })

  it.each([
    ['/public/..;/admin/x', '/admin/x'],
    ['/.;/admin/x', '/admin/x'],
    ['/;x/admin/x', '/admin/x'],
    ['/%2e%2e;/admin/x', '/admin/x'],
    ['/docs/x/..;/hang', '/docs/hang'],
  ])('matches %s as %s, as Tomcat reads it (parameters off, then dot segments)', (raw, match) => {
    expect(canonicalTarget(raw, 'GET')).toMatchObject({ match })
  })

  it('takes the host of an absolute-form target (RFC 9112 §3.2.2)', () => {
    expect(canonicalTarget('http://API.example.com:8080/x', 'GET')).toMatchObject({
      host: 'api.example.com:8080',
    })
  })

  it('accepts only canonical route prefixes', () => {
    expect(isCanonicalPrefix('/api/v1')).toBe(true)
    for (const bad of ['/a/../b', '/a//b', '/a;x', '/a?b', '/%61', '/a%2Fb'])
      expect(isCanonicalPrefix(bad), bad).toBe(false)
  })

  it.each([
    ['API.Example.com.:80', 'api.example.com'],
    ['[::1]:8080', '[::1]'],
    ['10.0.0.1', '10.0.0.1'],
    ['a b', undefined],
    ['host:port', undefined],
    ['-bad.example', undefined],
  ])('normalizeHost(%s) = %s', (raw, expected) => {
    expect(normalizeHost(raw)).toBe(expected)
  })
})
