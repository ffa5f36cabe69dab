// The config file: YAML (.yaml, .yml; duplicate keys are errors) or JSON (.json), validated whole.
import { readFile } from 'node:fs/promises'
import { extname } from 'node:path'
import { parse as parseYaml } from 'yaml'
import { type GatewayFile, validateConfigFile } from './schema.js'
import { GatewayConfigError } from './types.js'

/** Read and validate a config file (.yaml, .yml or .json). Throws GatewayConfigError. */
export async function readConfigFile(path: string): Promise<GatewayFile> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (error) {
    throw new GatewayConfigError([
      { path: '--config', message: `cannot read ${path}: ${(error as Error).message}` },
    ])
  }
  let raw: unknown
  try {
    raw = extname(path).toLowerCase() === '.json' ? JSON.parse(text) : parseYaml(text, { uniqueKeys: true })
  } catch (error) {
    const message = (error as Error).message.split('\n')[0] ?? 'parse error'
    throw new GatewayConfigError([
      { path: path, message: `not valid ${extname(path) === '.json' ? 'JSON' : 'YAML'}: ${message}` },
    ])
  }
  return validateConfigFile(raw ?? {})
}

/** Validate a parsed config document (also what tests and embedders call). */
