/**
 * How weftd and weftctl end: the exit status `main` returns; commander's own for --help, --version
 * and usage errors (it printed them); 1 with `<name>: <message>` for a WeftError; anything else
 * is a bug and is thrown with its stack.
 */
import { CommanderError } from 'commander';
import { WeftError } from './errors.ts';

/** Runs `main` on the process's arguments and sets the exit status from its outcome. */
export async function runCommand(name: string, main: (argv: string[]) => Promise<number>): Promise<void> {
  try {
    process.exitCode = await main(process.argv.slice(2));
  } catch (e) {
    if (e instanceof CommanderError) {
      process.exitCode = e.exitCode;
    } else if (e instanceof WeftError) {
      console.error(`${name}: ${e.message}`);
      process.exitCode = 1;
    } else {
      throw e;
    }
  }
}
