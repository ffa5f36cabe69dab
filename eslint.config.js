// Lint: typescript-eslint's type-aware recommended rules. Formatting is prettier's (npm run lint runs both).
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'packages/gateway/dist/',
      'packages/gateway/LICENSE',
      'node_modules/',
      'bench/results/',
      'scratch/',
      'coverage/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  { files: ['**/*.js', '**/*.mjs'], ...tseslint.configs.disableTypeChecked },
  {
    // The dashboard page: classic scripts sharing one scope (index.html loads them in order), so a
    // name one file declares and another uses is neither undefined nor unused. tsc checks them
    // together (src/gateway/ops/dashboard/tsconfig.json), which finds what these rules would.
    files: ['src/gateway/ops/dashboard/*.js'],
    rules: { 'no-undef': 'off', 'no-unused-vars': 'off', '@typescript-eslint/no-unused-vars': 'off' },
  },
)
