import { describe, expect, it } from 'vitest'
import {
  AcquireTimeoutError,
  ConfigError,
  createMemoryStore,
  createRedisStore,
  LeaseLostError,
  LockUpgradeError,
  StoreUnavailableError,
  TollgateError,
} from '../../src/index.js'

describe('errors', () => {
  it('carry stable codes, names and the evidence', () => {
    const cases: [TollgateError, string, string][] = [
      [new AcquireTimeoutError('k', 50), 'ERR_TOLLGATE_ACQUIRE_TIMEOUT', 'AcquireTimeoutError'],
      [new LeaseLostError('k', 'gone'), 'ERR_TOLLGATE_LEASE_LOST', 'LeaseLostError'],
      [new ConfigError('ttlMs', 'a number', -1), 'ERR_TOLLGATE_CONFIG', 'ConfigError'],
      [new LockUpgradeError('k', 'upgrade'), 'ERR_TOLLGATE_LOCK_UPGRADE', 'LockUpgradeError'],
      [
        new StoreUnavailableError('down', { cause: new Error('x') }),
        'ERR_TOLLGATE_STORE_UNAVAILABLE',
        'StoreUnavailableError',
      ],
    ]
    for (const [error, code, name] of cases) {
      expect(error).toBeInstanceOf(TollgateError)
      expect(error).toBeInstanceOf(Error)
      expect(error.code).toBe(code)
      expect(error.name).toBe(name)
    }
    expect(new AcquireTimeoutError('jobs', 50).message).toMatch(/"jobs".*50 ms.*timeoutMs/)
    expect(new ConfigError('ttlMs', 'an integer', -1).message).toBe(
      'Invalid option "ttlMs": expected an integer (received -1).',
    )
    // What is not a bad value words its own head; the evidence and the option stay the same.
    const unknown = new ConfigError(
      'limit',
      { message: 'Unknown option "limit": did you mean "permits"?' },
      5,
    )
    expect(unknown.message).toBe('Unknown option "limit": did you mean "permits"? (received 5).')
    expect([unknown.option, unknown.code, unknown.name]).toEqual([
      'limit',
      'ERR_TOLLGATE_CONFIG',
      'ConfigError',
    ])
    expect((cases[4]![0].cause as Error).message).toBe('x')
    expect(new LockUpgradeError('docs', 'upgrade').message).toMatch(/"docs".*read lock.*deadlock/)
    expect(new LockUpgradeError('docs', 'waiting').reason).toBe('waiting')
  })
})

describe('store options', () => {
  it('reject braces in the prefix and bad clients at construction', () => {
    expect(() => createMemoryStore({ prefix: 'a{b' })).toThrow('"prefix"')
    expect(() => createMemoryStore({ prefix: '' })).toThrow('"prefix"')
    expect(() => createRedisStore('http://nope')).toThrow('"client"')
    expect(() => createRedisStore({} as never)).toThrow('"client"')
    expect(() => createRedisStore('redis://127.0.0.1:1', { commandTimeoutMs: 0 })).toThrow(
      '"commandTimeoutMs"',
    )
  })
})
