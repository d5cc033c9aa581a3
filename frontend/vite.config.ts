import { defineConfig } from 'vitest/config';

// React's JSX goes through esbuild's automatic runtime: no Babel plugin needed for a production
// build, and development reloads the page instead of hot-swapping components.
// `npm run dev` proxies the API so the portal keeps one origin, as when the API serves it.
const api = process.env.SHARDWORK_API ?? 'http://127.0.0.1:8080';

export default defineConfig({
  esbuild: { jsx: 'automatic' },
  build: {
    target: 'es2022',
    sourcemap: true,
    rollupOptions: {
      output: {
        // Libraries change less often than the portal: separate chunks stay cached across releases.
        manualChunks: (id) =>
          id.includes('node_modules/viem') || id.includes('node_modules/@noble') || id.includes('node_modules/ox')
            ? 'viem'
            : id.includes('node_modules/react')
              ? 'react'
              : undefined,
      },
    },
  },
  server: {
    proxy: {
      '/v1': { target: api, changeOrigin: false },
      '/healthz': { target: api },
    },
  },
  test: {
    include: ['src/**/*.test.ts', 'src/**/*.test.tsx'],
    environment: 'node',
  },
});
