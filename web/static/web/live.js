// Accelplane live updates: one WebSocket to /ws/events/, resumed after the last seq seen.
//
// The page is rendered up to <body data-after>. Each event is shown once (by seq) in the
// event feeds, then the regions it concerns fetch their own fragment again:
//   [data-feed]             list the events (of one "cluster:Kind/ns/name" in data-object,
//                           without the kinds in data-skip, matching the events page's
//                           data-where-* filters and data-audit);
//   [data-live=NAME]        refetch ?fragment=NAME when an event kind starts with one of the
//                           prefixes in data-live-on (and is about data-live-object, if set);
//   tbody[data-live-rows]   refetch only the row of the event's object (?fragment=row).
(function () {
  "use strict";

  const WORKLOAD_KINDS = ["Job/", "JobSet/", "Deployment/", "LeaderWorkerSet/"];
  const FEED_LIMIT = 200;
  // Not signed in, or no longer (logout, revoked access): api/consumers.py, docs/api.md.
  const SIGNED_OUT = 4401;
  let lastSeq = Number(document.body.dataset.after || 0);
  let retryDelay = 500;
  const pending = new Map(); // fragment name or row key -> timer

  function setStatus(state, text) {
    const status = document.getElementById("live-status");
    if (status) {
      status.dataset.state = state;
      status.textContent = text;
    }
  }

  function fragmentUrl(name, extra) {
    const url = new URL(window.location.href);
    url.searchParams.set("fragment", name);
    for (const [key, value] of Object.entries(extra || {})) url.searchParams.set(key, value);
    return url;
  }

  async function fetchHtml(url) {
    const response = await fetch(url, { headers: { "X-Requested-With": "fetch" } });
    if (!response.ok) throw new Error(`${response.status} for ${url}`);
    return response.text();
  }

  // Several events in a burst cost one fetch per region.
  function later(key, action) {
    clearTimeout(pending.get(key));
    pending.set(key, setTimeout(() => {
      pending.delete(key);
      action().catch((error) => console.warn("live update failed", error));
    }, 150));
  }

  function refreshRegion(region) {
    const name = region.dataset.live;
    later(`region:${name}`, async () => {
      const html = await fetchHtml(fragmentUrl(name));
      const current = document.querySelector(`[data-live="${name}"]`);
      if (!current) return;
      const focused = document.activeElement && document.activeElement.id;
      current.outerHTML = html;
      if (focused) document.getElementById(focused)?.focus();
    });
  }

  function refreshRow(body, key) {
    later(`row:${key}`, async () => {
      const holder = document.createElement("tbody");
      holder.innerHTML = await fetchHtml(fragmentUrl("row", { object: key }));
      const fresh = holder.querySelector("tr[data-key]");
      const old = Array.from(body.querySelectorAll("tr[data-key]")).find((tr) => tr.dataset.key === key);
      if (old && fresh) old.replaceWith(fresh);
      else if (old) old.remove();
      else if (fresh) body.appendChild(fresh);
      const empty = body.querySelector("tr.empty");
      if (empty) empty.hidden = body.querySelector("tr[data-key]") !== null;
    });
  }

  function refreshRows(body) {
    later("rows", async () => {
      const holder = document.createElement("tbody");
      holder.innerHTML = await fetchHtml(fragmentUrl("row"));
      for (const old of body.querySelectorAll("tr[data-key]")) old.remove();
      const empty = body.querySelector("tr.empty");
      for (const fresh of holder.querySelectorAll("tr[data-key]")) body.insertBefore(fresh, empty);
      if (empty) empty.hidden = body.querySelector("tr[data-key]") !== null;
    });
  }

  // As the server's `clock` filter (web/templatetags/display.py): UTC, HH:MM:SS when today,
  // with the date otherwise, the full time on hover.
  function clock(iso) {
    const full = new Date(iso).toISOString(); // "YYYY-MM-DDTHH:MM:SS.sssZ"
    const day = full.slice(0, 10);
    const time = document.createElement("time");
    time.dateTime = iso;
    time.title = `${day} ${full.slice(11, 19)} UTC`;
    const today = new Date().toISOString().slice(0, 10);
    time.textContent = day === today ? full.slice(11, 19) : `${day} ${full.slice(11, 19)}`;
    return time;
  }

  function eventItem(event) {
    const item = document.createElement("li");
    item.dataset.seq = event.seq;
    item.className = `ev ev-${event.kind.replaceAll(".", "")}`;
    const time = clock(event.at);
    const kind = document.createElement("span");
    kind.className = "kind";
    kind.textContent = event.kind;
    item.append(time, " ", kind, " ");
    if (event.object) {
      const object = document.createElement("span");
      object.className = "obj";
      object.textContent = event.object;
      item.append(object, " ");
    }
    const message = document.createElement("span");
    message.className = "msg";
    message.textContent = event.message;
    item.append(message);
    return item;
  }

  // The events page's filters (events/filters.py): data-where-NAME and data-audit.
  function wanted(feed, event) {
    const where = feed.dataset;
    if (where.audit && (where.audit === "only") !== event.kind.startsWith("audit.")) return false;
    if (where.whereKind && !event.object.startsWith(`${where.whereKind}/`)) return false;
    return [
      ["whereCluster", event.cluster],
      ["whereNamespace", event.namespace],
      ["whereType", event.kind],
      ["whereWorkload", event.workload],
    ].every(([name, value]) => !where[name] || where[name] === value);
  }

  // A trimmed feed's "older" link starts after its new last item, so nothing is skipped.
  function trimmed(feed) {
    const older = document.querySelector("a[data-older]");
    if (!older || !feed.lastElementChild) return;
    const url = new URL(older.href);
    url.searchParams.set("before", feed.lastElementChild.dataset.seq);
    older.href = url;
    older.hidden = false;
  }

  function addToFeeds(event) {
    for (const feed of document.querySelectorAll("[data-feed]")) {
      if (feed.dataset.object && feed.dataset.object !== `${event.cluster}:${event.object}`) continue;
      if ((feed.dataset.skip || "").split(" ").includes(event.kind)) continue;
      if (!wanted(feed, event)) continue;
      if (feed.querySelector(`li[data-seq="${event.seq}"]`)) continue;
      feed.querySelector("li.empty")?.remove();
      const item = eventItem(event);
      if (feed.dataset.order === "asc") feed.append(item);
      else feed.prepend(item);
      // The overview's feed keeps the newest; a timeline keeps all of its object's history.
      if (feed.dataset.order === "asc") continue;
      if (feed.children.length <= FEED_LIMIT) continue;
      while (feed.children.length > FEED_LIMIT) feed.lastElementChild.remove();
      trimmed(feed);
    }
  }

  function concerns(region, event) {
    const prefixes = (region.dataset.liveOn || "").split(/\s+/).filter(Boolean);
    if (!prefixes.some((prefix) => event.kind.startsWith(prefix))) return false;
    const object = region.dataset.liveObject;
    return !object || object === `${event.cluster}:${event.object}`;
  }

  function handle(event) {
    if (event.seq <= lastSeq) return; // replayed after a reconnect, already shown
    lastSeq = event.seq;
    addToFeeds(event);
    for (const region of document.querySelectorAll("[data-live]")) {
      if (concerns(region, event)) refreshRegion(region);
    }
    if (WORKLOAD_KINDS.some((kind) => event.object.startsWith(kind))) {
      for (const body of document.querySelectorAll("tbody[data-live-rows]")) {
        refreshRow(body, `${event.cluster}:${event.object}`);
      }
    } else if (event.kind.startsWith("workload.") && !event.object) {
      // Many workloads at once (workload.pods past its per-round limit): every row again.
      for (const body of document.querySelectorAll("tbody[data-live-rows]")) refreshRows(body);
    }
  }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    // The page's own server, or the sockets' server on another port of its host (make stack).
    const port = document.body.dataset.socketPort;
    const host = port ? `${window.location.hostname}:${port}` : window.location.host;
    const socket = new WebSocket(`${scheme}://${host}/ws/events/?after=${lastSeq}`);
    socket.addEventListener("open", () => setStatus("catching-up", "catching up…"));
    socket.addEventListener("message", (message) => {
      const frame = JSON.parse(message.data);
      if (frame.type === "event") handle(frame.event);
      else if (frame.type === "caught_up") {
        retryDelay = 500;
        setStatus("live", "live");
      }
    });
    socket.addEventListener("close", (close) => {
      if (close.code === SIGNED_OUT) {
        setStatus("offline", "signed out");
        return;
      }
      setStatus("reconnecting", "reconnecting…");
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 5000);
    });
  }

  if (document.getElementById("live-status")) connect();
})();
