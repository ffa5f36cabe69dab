// What the `tollgate-gateway` bin says when a package the gateway needs is not installed (a copied
// or hand-assembled node_modules, a bundler's externals): every one that is missing, and one command
// that installs them all, for the package manager and the way the bin was run. main.ts uses it before
// cli.ts loads, so it imports nothing that could be missing.

/** tollgate-gateway's dependencies (packages/gateway/package.json; test/gateway/missing-packages.test.ts
 * keeps the two equal), in the order an install command lists them. */
export const GATEWAY_PACKAGES = [
  'ioredis',
  'pino',
  'prom-client',
  'proxy-addr',
  'undici',
  'yaml',
  'zod',
] as const

/** The package a failed import could not find, if it is a package (not a file of ours). */
export function missingPackageOf(error: unknown): string | undefined {
  if ((error as NodeJS.ErrnoException | undefined)?.code !== 'ERR_MODULE_NOT_FOUND') return undefined
  const name = /Cannot find (?:package|module) '([^']+)'/.exec(String((error as Error).message))?.[1]
  return name !== undefined && /^(?:@[\w-][\w.-]*\/)?[\w-][\w.-]*$/.test(name) ? name : undefined
}

/** Which of GATEWAY_PACKAGES (and `first`, the one the bin failed on) cannot be loaded. Loads each
 * present one: for the bin's error path only. */
export async function missingPackages(
  first: string,
  load: (name: string) => Promise<unknown> = (name) => import(name),
): Promise<string[]> {
  const missing = new Set<string>()
  for (const name of GATEWAY_PACKAGES) {
    if (name === first) missing.add(name)
    else await load(name).catch((error: unknown) => missingPackageOf(error) === name && missing.add(name))
  }
  missing.add(first)
  return [...missing]
}

export interface RunContext {
  /** The bin's path (process.argv[1]): under npm's npx cache, an install in the project does not help. */
  bin?: string | undefined
  /** npm_config_user_agent, set by npm, pnpm, yarn and bun when they run the bin. */
  userAgent?: string | undefined
}

/** The lines the bin prints (each starts with "tollgate: "): what is missing and how to install it. */
export function missingPackagesMessage(missing: readonly string[], context: RunContext = {}): string {
  const list = missing.length === 1 ? missing[0] : `${missing.slice(0, -1).join(', ')} and ${missing.at(-1)}`
  const them = missing.length === 1 ? 'it' : 'them'
  const lines = [
    `the gateway needs ${list}, which ${missing.length === 1 ? 'is a dependency' : 'are dependencies'} of tollgate-gateway but not installed here.`,
  ]
  if (/[\\/]_npx[\\/]/.test(context.bin ?? '')) {
    const packages = ['tollgate-gateway', ...missing].map((name) => `-p ${name}`).join(' ')
    lines.push(`run it with ${them}: npx ${packages} tollgate-gateway <your flags>`)
  } else {
    lines.push(`install ${them}: ${installCommand(context.userAgent)} ${missing.join(' ')}`)
  }
  return lines.map((line) => `tollgate: ${line}\n`).join('')
}

function installCommand(userAgent: string | undefined): string {
  const agent = /^([\w-]+)\//.exec(userAgent ?? '')?.[1]
  return agent === 'pnpm'
    ? 'pnpm add'
    : agent === 'yarn'
      ? 'yarn add'
      : agent === 'bun'
        ? 'bun add'
        : 'npm install'
}
