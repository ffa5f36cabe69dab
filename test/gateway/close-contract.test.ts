// The close contract's checks on their own (src/gateway/http/close-contract.ts): a repeat of any step
// is a breach, counted, the first of each step logged, and raised (under test: thrown uncaught); the
// first close, end and release stand. The gateway's paths through it are disconnect-matrix.test.ts's.
import { describe, expect, it } from 'vitest'
import {
  breachReporter,
  CloseContract,
  type CloseContractBreach,
  type ContractStep,
} from '../../src/gateway/http/close-contract.js'

function contract() {
  const counted: ContractStep[] = []
  const logged: string[] = []
  const raised: CloseContractBreach[] = []
  const report = breachReporter(
    (step) => counted.push(step),
    (step, message) => logged.push(`${step}: ${message}`),
    (error) => raised.push(error),
  )
  return { contract: new CloseContract(report), counted, logged, raised }
}

describe('the close contract', () => {
  it('keeps to it: a close, the other source after it, one upstream end, each permit back once', () => {
    const { contract: c, counted, raised } = contract()
    c.took()
    c.took()
    expect(c.upstream('finished')).toBe(true)
    expect(c.close('connection')).toBe(true)
    expect(c.closed).toBe(true)
    expect(c.close('response')).toBe(false) // the response's own 'close' after its connection's
    expect(c.release()).toBe(true)
    expect(c.release()).toBe(true)
    c.releasedAll()
    expect(counted).toEqual([])
    expect(raised).toEqual([])
  })

  it('a second close from one source: ignored, counted, logged and raised', () => {
    const { contract: c, counted, logged, raised } = contract()
    expect(c.close('response')).toBe(true)
    expect(c.close('response')).toBe(false)
    expect(counted).toEqual(['close'])
    expect(logged).toEqual(['close: a second close from the response'])
    expect(raised.map((error) => error.message)).toEqual([
      'close contract (src/gateway/http/close-contract.ts): a second close from the response',
    ])
  })

  it('an upstream request that ends twice (told after it finished, or reported twice): the first stands', () => {
    const { contract: c, counted, raised } = contract()
    expect(c.upstream('aborted')).toBe(true)
    expect(c.upstream('finished')).toBe(false)
    expect(c.upstream('aborted')).toBe(false)
    expect(c.upstreamEnd).toBe('aborted')
    expect(counted).toEqual(['upstream', 'upstream'])
    expect(raised[0]?.message).toMatch(/ended twice: aborted, then finished/)
  })

  it('a permit released twice, and one still held at the close', () => {
    const { contract: c, counted, raised } = contract()
    c.took()
    expect(c.release()).toBe(true)
    expect(c.release()).toBe(false)
    expect(raised[0]?.message).toMatch(/released twice/)
    const other = contract()
    other.contract.took()
    other.contract.close('response')
    other.contract.releasedAll()
    expect(other.raised[0]?.message).toMatch(/1 permit\(s\) not released/)
    expect(counted).toEqual(['release'])
    expect(other.counted).toEqual(['release'])
  })

  it('logs the first breach of each step only, and counts and raises them all', () => {
    const { contract: c, counted, logged, raised } = contract()
    c.close('response')
    for (let i = 0; i < 3; i++) c.close('response')
    expect(counted).toEqual(['close', 'close', 'close'])
    expect(logged).toHaveLength(1)
    expect(raised).toHaveLength(3)
  })

  it('raises under TOLLGATE_CLOSE_CONTRACT=throw (as vitest.config.ts sets it): thrown on the next tick, uncaught', async () => {
    expect(process.env.TOLLGATE_CLOSE_CONTRACT).toBe('throw')
    const thrown: unknown[] = []
    const listeners = process.listeners('uncaughtException')
    process.removeAllListeners('uncaughtException')
    process.once('uncaughtException', (error) => thrown.push(error))
    try {
      const c = new CloseContract(
        breachReporter(
          () => {},
          () => {},
        ),
      )
      c.close('response')
      expect(c.close('response')).toBe(false) // not thrown here: the caller goes on
      await new Promise((resolve) => setImmediate(resolve))
    } finally {
      for (const listener of listeners) process.on('uncaughtException', listener)
    }
    expect(String(thrown[0])).toMatch(/CloseContractBreach|a second close from the response/)
  })
})
