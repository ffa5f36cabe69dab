import { describe, expect, it } from 'vitest'
import { DEFAULT_BUCKET, normalizeKey } from '../../src/admission/keys.js'

describe('G8: normalizeKey', () => {
  it('sends missing, empty and non-string keys to the default bucket', () => {
    for (const raw of [undefined, null, '', '   ', {}, Symbol('x')])
      expect(normalizeKey(raw)).toBe(DEFAULT_BUCKET)
  })
  it('takes the first of repeated header values and trims', () => {
    expect(normalizeKey([' a ', 'b'])).toBe('a')
    expect(normalizeKey(42)).toBe('42')
  })
  it('replaces keys over 256 characters by a digest, distinct per value', () => {
    const a = normalizeKey('a'.repeat(64 * 1024))
    expect(a).toMatch(/^sha256:[\w-]{43}$/)
    expect(normalizeKey(`${'a'.repeat(64 * 1024)}b`)).not.toBe(a)
  })
  it('passes braces and control bytes through for keySpace() to encode', () => {
    expect(normalizeKey('{x}\u0000')).toBe('{x}\u0000')
    expect(normalizeKey('a{b}\u0001c')).toBe('a{b}\u0001c')
  })
})
