"use strict";(self.rspackChunkease_jupyter=self.rspackChunkease_jupyter||[]).push([[232],{475(e,t,r){var a=r(601),n=r.n(a),o=r(314),s=(r.n(o))()(n());s.push([e.id,`.easeml-sidebar {
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
`,""]),r.d(t,{},{A:s})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",a=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),a&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),a&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,a,n,o){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(a)for(var i=0;i<this.length;i++){var c=this[i][0];null!=c&&(s[c]=!0)}for(var l=0;l<e.length;l++){var u=[].concat(e[l]);a&&s[u[0]]||(void 0!==o&&(void 0===u[5]||(u[1]="@layer".concat(u[5].length>0?" ".concat(u[5]):""," {").concat(u[1],"}")),u[5]=o),r&&(u[2]&&(u[1]="@media ".concat(u[2]," {").concat(u[1],"}")),u[2]=r),n&&(u[4]?(u[1]="@supports (".concat(u[4],") {").concat(u[1],"}"),u[4]=n):u[4]="".concat(n)),t.push(u))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,a=0;a<t.length;a++)if(t[a].identifier===e){r=a;break}return r}function a(e,a){for(var n={},o=[],s=0;s<e.length;s++){var i=e[s],c=a.base?i[0]+a.base:i[0],l=n[c]||0,u="".concat(c," ").concat(l);n[c]=l+1;var p=r(u),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==p)t[p].references++,t[p].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,a);a.byIndex=s,t.splice(s,0,{identifier:u,updater:f,references:1})}o.push(u)}return o}e.exports=function(e,n){var o=a(e=e||[],n=n||{});return function(e){e=e||[];for(var s=0;s<o.length;s++){var i=r(o[s]);t[i].references--}for(var c=a(e,n),l=0;l<o.length;l++){var u=r(o[l]);0===t[u].references&&(t[u].updater(),t.splice(u,1))}o=c}}},659(e){var t={};e.exports=function(e,r){var a=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!a)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");a.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},206(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var a,n,o;a="",r.supports&&(a+="@supports (".concat(r.supports,") {")),r.media&&(a+="@media ".concat(r.media," {")),(n=void 0!==r.layer)&&(a+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),a+=r.css,n&&(a+="}"),r.media&&(a+="}"),r.supports&&(a+="}"),(o=r.sourceMap)&&"u">typeof btoa&&(a+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(o))))," */")),e.styleTagTransform(a,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},579(e,t,r){var a=r(72),n=r.n(a),o=r(206),s=r.n(o),i=r(659),c=r.n(i),l=r(56),u=r.n(l),p=r(540),d=r.n(p),f=r(113),m=r.n(f),v=r(475),h={};h.styleTagTransform=m(),h.setAttributes=u(),h.insert=c().bind(null,"head"),h.domAPI=s(),h.insertStyleElement=d(),n()(v.A,h),v.A&&v.A.locals&&v.A.locals}}]);