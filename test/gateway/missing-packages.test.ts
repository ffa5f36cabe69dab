// What the bin prints when packages the gateway needs are missing (main.ts, before cli.ts loads): all
// of them in one install command for the package manager that ran it. The real bin
// in an install without them: test/package/package.test.ts.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import {
  GATEWAY_PACKAGES,
  missingPackageOf,
  missingPackages,
  missingPackagesMessage,
} from '../../src/gateway/missing-packages.js'

/** A loader on which `absent` cannot be found, as Node reports it. */
const loaderWithout =
  (...absent: string[]) =>
  (name: string): Promise<unknown> =>
    absent.includes(name)
      ? Promise.reject(
          Object.assign(new Error(`Cannot find package '${name}' imported from /x/main.js`), {
            code: 'ERR_MODULE_NOT_FOUND',
          }),
        )
      : Promise.resolve({})

describe('the missing-package message of the bin', () => {
  it('names what is missing as dependencies of tollgate-gateway, in one install command', () => {
    expect(missingPackagesMessage(['ioredis'])).toBe(
      'tollgate: the gateway needs ioredis, which is a dependency of tollgate-gateway but not installed here.\n' +
        'tollgate: install it: npm install ioredis\n',
    )
    expect(missingPackagesMessage([...GATEWAY_PACKAGES])).toBe(
      'tollgate: the gateway needs ioredis, pino, prom-client, proxy-addr, undici, yaml and zod, which are dependencies of tollgate-gateway but not installed here.\n' +
        'tollgate: install them: npm install ioredis pino prom-client proxy-addr undici yaml zod\n',
    )
  })

  it('knows every dependency of tollgate-gateway (a missing one is named in the one command)', () => {
    const { dependencies } = JSON.parse(
      readFileSync(new URL('../../packages/gateway/package.json', import.meta.url), 'utf8'),
    ) as { dependencies: Record<string, string> }
    expect([...GATEWAY_PACKAGES].sort()).toEqual(Object.keys(dependencies).sort())
  })

  it('speaks the package manager that ran the bin, and says how to run it with npx', () => {
    expect(missingPackagesMessage(['ioredis'], { userAgent: 'pnpm/9.1.0 npm/? node/v22.0.0' })).toContain(
      'pnpm add ioredis',
    )
    expect(missingPackagesMessage(['ioredis'], { userAgent: 'yarn/1.22.22 npm/? node/v22.0.0' })).toContain(
      'yarn add ioredis',
    )
    expect(
      missingPackagesMessage(['ioredis'], {
        bin: '/home/u/.npm/_npx/6b6f/node_modules/tollgate-gateway/dist/gateway/main.js',
      }),
    ).toContain('run it with it: npx -p tollgate-gateway -p ioredis tollgate-gateway <your flags>')
  })

  it('finds every missing one, the one the bin failed on first', async () => {
    expect(await missingPackages('ioredis', loaderWithout('ioredis', 'zod'))).toEqual(['ioredis', 'zod'])
    expect(await missingPackages('pino', loaderWithout('pino'))).toEqual(['pino'])
    // A package this list does not know is named too; a present package failing otherwise is not.
    const broken = (name: string) =>
      name === 'undici' ? Promise.reject(new Error('needs a newer Node')) : Promise.resolve({})
    expect(await missingPackages('left-pad', broken)).toEqual(['left-pad'])
  })

  it('reads the package from a real failed import, never a file of ours', async () => {
    const error = await import('tollgate-no-such-package' as string).catch((e: unknown) => e)
    expect(missingPackageOf(error)).toBe('tollgate-no-such-package')
    const file = await import('./no-such-file.js' as string).catch((e: unknown) => e)
    expect(missingPackageOf(file)).toBeUndefined()
    expect(missingPackageOf(new Error('boom'))).toBeUndefined()
  })
})
