"use strict";(self.rspackChunkease_jupyter=self.rspackChunkease_jupyter||[]).push([[232],{475(e,t,o){var r=o(601),a=o.n(r),n=o(314),s=(o.n(n))()(a());s.push([e.id,`.easeml-sidebar {
  display: flex;
  flex-direction: column;
  gap: 4px;
  padding: 8px;
  overflow-y: auto;
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-size: var(--jp-ui-font-size1);
}

.easeml-header {
  display: flex;
  align-items: center;
  justify-content: space-between;
}

.easeml-header h2 {
  margin: 0;
  font-size: var(--jp-ui-font-size2);
  font-weight: 600;
}

.easeml-status,
.easeml-hint,
.easeml-empty {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
}

.easeml-error {
  padding: 6px;
  border-left: 3px solid var(--jp-error-color1);
  background: var(--jp-error-color3, #fde7e9);
  color: var(--jp-ui-font-color1);
  white-space: pre-wrap;
  word-break: break-word;
}

.easeml-tasks {
  list-style: none;
  margin: 0;
  padding: 0;
}

.easeml-tasks.easeml-stale {
  opacity: 0.6;
}

.easeml-task {
  display: grid;
  grid-template-columns: 1fr auto auto;
  gap: 6px;
  align-items: center;
  padding: 4px 6px;
  border-radius: 3px;
  cursor: pointer;
}

.easeml-task:hover,
.easeml-task:focus {
  background: var(--jp-layout-color2);
  outline: none;
}

.easeml-task-name {
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  font-family: var(--jp-code-font-family);
}

.easeml-task-state {
  padding: 0 4px;
  border-radius: 2px;
  font-size: var(--jp-ui-font-size0);
  background: var(--jp-layout-color3);
}

.easeml-state-running {
  background: var(--jp-brand-color3);
}

.easeml-state-idle {
  background: var(--jp-success-color3, #d4edda);
}

.easeml-state-cancelled {
  background: var(--jp-warn-color3, #fff3cd);
}

.easeml-task-accuracy {
  font-variant-numeric: tabular-nums;
  min-width: 3.5em;
  text-align: right;
}

.easeml-notebooks-title {
  margin: 8px 0 0;
  font-size: var(--jp-ui-font-size1);
  font-weight: 600;
}

.easeml-notebooks {
  list-style: none;
  margin: 0;
  padding: 0;
}

.easeml-notebook {
  display: grid;
  grid-template-columns: 1fr auto auto;
  gap: 6px;
  align-items: center;
  padding: 2px 6px;
}

.easeml-notebook-path {
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
}

.easeml-notebook-server,
.easeml-notebooks-note {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
}

.easeml-notebook-state.easeml-notebook-gone {
  color: var(--jp-ui-font-color3);
}

.easeml-notebook-state.easeml-notebook-alive {
  color: var(--jp-success-color1);
}
`,""]),o.d(t,{},{A:s})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var o="",r=void 0!==t[5];return t[4]&&(o+="@supports (".concat(t[4],") {")),t[2]&&(o+="@media ".concat(t[2]," {")),r&&(o+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),o+=e(t),r&&(o+="}"),t[2]&&(o+="}"),t[4]&&(o+="}"),o}).join("")},t.i=function(e,o,r,a,n){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(r)for(var i=0;i<this.length;i++){var l=this[i][0];null!=l&&(s[l]=!0)}for(var c=0;c<e.length;c++){var p=[].concat(e[c]);r&&s[p[0]]||(void 0!==n&&(void 0===p[5]||(p[1]="@layer".concat(p[5].length>0?" ".concat(p[5]):""," {").concat(p[1],"}")),p[5]=n),o&&(p[2]&&(p[1]="@media ".concat(p[2]," {").concat(p[1],"}")),p[2]=o),a&&(p[4]?(p[1]="@supports (".concat(p[4],") {").concat(p[1],"}"),p[4]=a):p[4]="".concat(a)),t.push(p))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function o(e){for(var o=-1,r=0;r<t.length;r++)if(t[r].identifier===e){o=r;break}return o}function r(e,r){for(var a={},n=[],s=0;s<e.length;s++){var i=e[s],l=r.base?i[0]+r.base:i[0],c=a[l]||0,p="".concat(l," ").concat(c);a[l]=c+1;var u=o(p),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==u)t[u].references++,t[u].updater(d);else{var f=function(e,t){var o=t.domAPI(t);return o.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&o.update(e=t):o.remove()}}(d,r);r.byIndex=s,t.splice(s,0,{identifier:p,updater:f,references:1})}n.push(p)}return n}e.exports=function(e,a){var n=r(e=e||[],a=a||{});return function(e){e=e||[];for(var s=0;s<n.length;s++){var i=o(n[s]);t[i].references--}for(var l=r(e,a),c=0;c<n.length;c++){var p=o(n[c]);0===t[p].references&&(t[p].updater(),t.splice(p,1))}n=l}}},659(e){var t={};e.exports=function(e,o){var r=function(e){if(void 0===t[e]){var o=document.querySelector(e);if(window.HTMLIFrameElement&&o instanceof window.HTMLIFrameElement)try{o=o.contentDocument.head}catch(e){o=null}t[e]=o}return t[e]}(e);if(!r)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");r.appendChild(o)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,o){e.exports=function(e){var t=o.nc;t&&e.setAttribute("nonce",t)}},206(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(o){var r,a,n;r="",o.supports&&(r+="@supports (".concat(o.supports,") {")),o.media&&(r+="@media ".concat(o.media," {")),(a=void 0!==o.layer)&&(r+="@layer".concat(o.layer.length>0?" ".concat(o.layer):""," {")),r+=o.css,a&&(r+="}"),o.media&&(r+="}"),o.supports&&(r+="}"),(n=o.sourceMap)&&"u">typeof btoa&&(r+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(n))))," */")),e.styleTagTransform(r,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},579(e,t,o){var r=o(72),a=o.n(r),n=o(206),s=o.n(n),i=o(659),l=o.n(i),c=o(56),p=o.n(c),u=o(540),d=o.n(u),f=o(113),m=o.n(f),v=o(475),g={};g.styleTagTransform=m(),g.setAttributes=p(),g.insert=l().bind(null,"head"),g.domAPI=s(),g.insertStyleElement=d(),a()(v.A,g),v.A&&v.A.locals&&v.A.locals}}]);