// faultproxy's preload for Node agents (NODE_OPTIONS=--require <this file>), run before the agent.
//
// Node's global fetch, and the SDKs built on it (npm openai, @anthropic-ai/sdk), ignore
// HTTP(S)_PROXY unless NODE_USE_ENV_PROXY=1 is honoured, which Node does from 24 (and 22.21).
// On an older Node, when the agent's project has the npm `undici` package (7.x runs on Node 20),
// this installs undici's EnvHttpProxyAgent as the global dispatcher: the one global fetch uses
// too, so the agent's requests reach the proxy unmodified. Without `undici` it does nothing (the
// run then says no traffic reached the proxy, and docs/agents.md says what to add).
'use strict';

const path = require('node:path');
const { createRequire } = require('node:module');

function honoursEnvProxy() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  return major >= 24 || (major === 22 && minor >= 21);
}

// The agent's project: the folder of its main script, then the working directory.
function projectUndici() {
  const bases = [process.cwd()];
  if (process.argv[1]) bases.unshift(path.dirname(path.resolve(process.argv[1])));
  for (const base of bases) {
    try {
      return createRequire(path.join(base, 'index.js'))('undici');
    } catch (error) {
      // not resolvable from there
    }
  }
  return null;
}

if (!honoursEnvProxy() && (process.env.HTTPS_PROXY || process.env.HTTP_PROXY)) {
  const undici = projectUndici();
  if (undici && typeof undici.EnvHttpProxyAgent === 'function') {
    try {
      undici.setGlobalDispatcher(new undici.EnvHttpProxyAgent());
    } catch (error) {
      process.stderr.write(`faultproxy: could not route fetch through the proxy with undici: ${error.message}\n`);
    }
  }
}
