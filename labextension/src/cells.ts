/**
 * What the commands write into notebooks: `%easeml` cells inserted below the
 * active cell of the current notebook (a new notebook when none is open).
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ISessionContext } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

/** Loads the magics quietly (no output, nothing printed when already loaded). */
const LOAD_MAGICS = "get_ipython().extension_manager.load_extension('ease_jupyter')";

/** A task name as one argument of a magic line. */
export function quoteName(name: string): string {
  return /^[\w.-]+$/.test(name) ? name : JSON.stringify(name);
}

export function statusSource(name: string): string {
  return `%easeml status ${quoteName(name)}`;
}

/** The service view: every user, who is served now and why (the magics' `status --all`). */
export const SERVICE_VIEW_SOURCE = '%easeml status --all';

export function newTaskSource(name: string): string {
  return [
    `%%easeml task ${quoteName(name)}`,
    '# The ease.ml program: the shapes of one example\'s input and output tensors.',
    '# Edit them and run this cell; then `%easeml feed ' + quoteName(name) + ' X y`.',
    '# Short form: input: [64,64,3]  output: [2]',
    '{input: {[Tensor[64,64,3]], []}, output: {[Tensor[2]], []}}'
  ].join('\n');
}

/** The notebook to write into: the current one, or a new Python notebook. */
export async function targetNotebook(app: JupyterFrontEnd, tracker: INotebookTracker): Promise<NotebookPanel> {
  let panel = tracker.currentWidget;
  if (!panel) {
    panel = (await app.commands.execute('notebook:create-new', { kernelName: 'python3' })) as NotebookPanel;
  }
  await panel.context.ready;
  app.shell.activateById(panel.id);
  return panel;
}

async function loadMagics(session: ISessionContext): Promise<void> {
  await session.ready;
  const kernel = session.session?.kernel;
  if (!kernel) {
    return;
  }
  try {
    await kernel.requestExecute({ code: LOAD_MAGICS, silent: true, store_history: false }).done;
  } catch (error) {
    console.warn('ease.ml: could not load the magics', error);
  }
}

/**
 * Put `source` in a new cell below the active one (or in the notebook's only,
 * empty cell) and, when `run`, load the magics and run it.
 */
export async function insertCell(panel: NotebookPanel, source: string, run: boolean): Promise<void> {
  const notebook = panel.content;
  const only = notebook.widgets.length === 1 ? notebook.widgets[0] : null;
  if (!(only && only.model.type === 'code' && only.model.sharedModel.getSource() === '')) {
    NotebookActions.insertBelow(notebook);
  }
  const cell = notebook.activeCell;
  if (!cell) {
    throw new Error('ease.ml: the notebook has no active cell');
  }
  cell.model.sharedModel.setSource(source);
  if (run) {
    await loadMagics(panel.sessionContext);
    await NotebookActions.run(notebook, panel.sessionContext);
  } else {
    notebook.mode = 'edit';
  }
}
