/**
 * The forest view's entry: `/ui` shows the live roots, `/ui/forests/{rootId}` one forest.
 * Every data call goes to the /v1 API with the operator key (api.js).
 */
import { showKeyAction } from './chrome.js';
import { showForestPage } from './forest-page.js';
import { showStartPage } from './start-page.js';

const main = document.getElementById('main');
const forest = /^\/ui\/forests\/([^/]+)\/?$/.exec(location.pathname);
showKeyAction();
if (forest !== null) showForestPage(main, decodeURIComponent(forest[1]));
else void showStartPage(main);
