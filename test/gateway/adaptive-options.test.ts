// An adaptive limit's drop rules in the gateway's config (docs/adaptive.md): the default
// drops (timeouts and 503, not 429: one user's answer), and the share of a client's requests above
// which it counts as dropped (`dropShare`, --adaptive-drop-share), validated where it is given.
import { describe, expect, it } from 'vitest'
import { GatewayConfigError, parseFlags, resolveConfig, validateConfigFile } from '../../src/gateway/index.js'

/** The message of the GatewayConfigError `fn` throws. */
function problem(fn: () => unknown): string {
  try {
    fn()
  } catch (error) {
    expect(error).toBeInstanceOf(GatewayConfigError)
    return (error as Error).message
  }
  throw new Error('expected a GatewayConfigError')
}

const route = (adaptive: Record<string, unknown>) => ({
  routes: [{ match: { pathPrefix: '/' }, upstream: 'http://u', concurrency: { per: 'route', adaptive } }],
})

describe("an adaptive limit's drop rules in the gateway's config", () => {
  it('defaults: timeouts and 503 are drops, 429 is not; a client is over the share above 5 % of drops', () => {
    const config = resolveConfig({}, parseFlags(['--upstream=http://u', '--adaptive-max=16']))
    expect(config.routes[0]!.concurrency?.adaptive).toMatchObject({
      drops: ['timeout', 503],
      dropShare: 0.05,
    })
  })

  it('takes dropShare from the file and --adaptive-drop-share', () => {
    const fromFile = resolveConfig(validateConfigFile(route({ max: 16, dropShare: 0.2, drops: [429, 503] })))
    expect(fromFile.routes[0]!.concurrency?.adaptive).toMatchObject({ drops: [429, 503], dropShare: 0.2 })
    const fromFlags = resolveConfig(
      {},
      parseFlags([
        '--upstream=http://u',
        '--adaptive-max=16',
        '--adaptive-drop-share=0',
        '--adaptive-drops=429',
      ]),
    )
    expect(fromFlags.routes[0]!.concurrency?.adaptive).toMatchObject({ drops: [429], dropShare: 0 })
  })

  it.each([1, 2, -0.1, '5%'])('refuses dropShare %j in the file, naming it', (dropShare) => {
    expect(problem(() => validateConfigFile(route({ max: 16, dropShare })))).toBe(
      'routes[0].concurrency.adaptive.dropShare: expected a number from 0 to 0.99 (a share: 0.05 is 5 %)',
    )
  })

  it.each(['1', '5%', '0.5.1', '.05', ''])('refuses --adaptive-drop-share=%s, naming it', (value) => {
    expect(problem(() => parseFlags([`--adaptive-drop-share=${value}`]))).toContain(
      '--adaptive-drop-share: expected a decimal from 0 to 0.99, e.g. 0.05',
    )
  })
})
