#!/usr/bin/env node
// The published entry point: TypeScript sources run through tsx's loader, so there is no
// build step and no build output to ship or to drift from the sources.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
