/// The JavaScript around a configured sync function (the shape of Sync Gateway's `sync_runner.go`
/// wrapper): the builtins are closures of one IIFE, so the user's function sees them as free variables
/// and their state is private to the wrapper. The IIFE returns the driver the workers call with
/// `(doc, oldDoc, userCtx)`; it answers either `{"channels","access","roles","expiry"}` or, for a
/// `throw({forbidden|unauthorized})`, `{"status","reason"}`. Any other exception escapes to Swift (500).
enum SyncWrapper {
    /// Sync Gateway's default sync function.
    static let defaultSource = "function(doc){channel(doc.channels);}"

    /// The driver source for `source`. The user's text sits on lines of its own, so a trailing `//`
    /// comment cannot swallow the wrapper's closing parenthesis.
    static func source(wrapping source: String) -> String {
        prelude + "\n    var syncFn = (\n" + source + "\n    );\n" + epilogue
    }

    private static let prelude = #"""
        (function() {
            var state = null;
            var console = { log: function() {} };
            function log() {}
            function makeArray(v) { return Array.isArray(v) ? v : [v]; }
            function addStrings(out, v) {
                if (v === null || v === undefined) return;
                if (Array.isArray(v)) {
                    for (var i = 0; i < v.length; i++) addStrings(out, v[i]);
                } else if (typeof v === "string") {
                    out.push(v);
                }
                // Other values are ignored, as Sync Gateway ignores non-string channel names.
            }
            function strings(v) { var out = []; addStrings(out, v); return out; }
            function anyIn(wanted, have) {
                for (var i = 0; i < wanted.length; i++) if (have.indexOf(wanted[i]) >= 0) return true;
                return false;
            }
            function grant(map, users, values) {
                var us = strings(users), vs = strings(values);
                for (var i = 0; i < us.length; i++) {
                    var list = map[us[i]] || (map[us[i]] = []);
                    for (var j = 0; j < vs.length; j++) list.push(vs[j]);
                }
            }
            function channel() {
                for (var i = 0; i < arguments.length; i++) addStrings(state.channels, arguments[i]);
            }
            function access(users, channels) { grant(state.access, users, channels); }
            function role(users, roles) { grant(state.roles, users, roles); }
            function expiry(value) { state.expiry = (value === undefined) ? null : value; }
            function requireUser(names) {
                if (!state.validate) return;
                if (strings(names).indexOf(state.user.name) < 0) throw({forbidden: "wrong user"});
            }
            function requireRole(roles) {
                if (!state.validate) return;
                if (!anyIn(strings(roles), state.user.roles)) throw({forbidden: "missing role"});
            }
            function requireAccess(channels) {
                if (!state.validate) return;
                if (!anyIn(strings(channels), state.user.channels)) throw({forbidden: "missing channel access"});
            }
            function requireAdmin() {
                if (state.validate) throw({forbidden: "admin required"});
            }
            // A small stand-in for the Underscore.js that Sync Gateway exposes as `_` (only these helpers;
            // docs/internals/sync-function.md). Arrays are compared by ===, results keep first-seen order.
            var _ = (function() {
                function has(list, v) { return list.indexOf(v) >= 0; }
                function uniq(list) {
                    var out = [];
                    for (var i = 0; i < list.length; i++) if (!has(out, list[i])) out.push(list[i]);
                    return out;
                }
                function arrays(args, from) {
                    var out = [];
                    for (var i = from; i < args.length; i++) out.push(Array.isArray(args[i]) ? args[i] : []);
                    return out;
                }
                return {
                    isArray: function(v) { return Array.isArray(v); },
                    isString: function(v) { return typeof v === "string"; },
                    isObject: function(v) { return v !== null && (typeof v === "object" || typeof v === "function"); },
                    isEmpty: function(v) {
                        if (v === null || v === undefined) return true;
                        if (Array.isArray(v) || typeof v === "string") return v.length === 0;
                        return typeof v === "object" ? Object.keys(v).length === 0 : false;
                    },
                    keys: function(o) { return (o !== null && typeof o === "object") ? Object.keys(o) : []; },
                    values: function(o) {
                        if (o === null || typeof o !== "object") return [];
                        return Object.keys(o).map(function(k) { return o[k]; });
                    },
                    has: function(o, k) { return o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k); },
                    contains: function(list, v) {
                        if (Array.isArray(list) || typeof list === "string") return list.indexOf(v) >= 0;
                        if (list !== null && typeof list === "object") return has(_.values(list), v);
                        return false;
                    },
                    uniq: function(list) { return Array.isArray(list) ? uniq(list) : []; },
                    union: function() {
                        var all = [];
                        var lists = arrays(arguments, 0);
                        for (var i = 0; i < lists.length; i++) all = all.concat(lists[i]);
                        return uniq(all);
                    },
                    intersection: function(list) {
                        var others = arrays(arguments, 1);
                        return uniq(Array.isArray(list) ? list : []).filter(function(v) {
                            return others.every(function(o) { return has(o, v); });
                        });
                    },
                    difference: function(list) {
                        var others = arrays(arguments, 1);
                        return (Array.isArray(list) ? list : []).filter(function(v) {
                            return !others.some(function(o) { return has(o, v); });
                        });
                    },
                    without: function(list) {
                        var drop = Array.prototype.slice.call(arguments, 1);
                        return (Array.isArray(list) ? list : []).filter(function(v) { return !has(drop, v); });
                    }
                };
            })();
        """#

    private static let epilogue = #"""
            if (typeof syncFn !== "function") throw new Error("the sync function is not a function");
            return function(doc, oldDoc, userCtx) {
                state = {channels: [], access: {}, roles: {}, expiry: null,
                         validate: userCtx !== null, user: userCtx};
                try {
                    syncFn(doc, oldDoc);
                } catch (x) {
                    state = null;
                    if (x !== null && typeof x === "object") {
                        if (x.forbidden !== undefined) return {status: 403, reason: String(x.forbidden)};
                        if (x.unauthorized !== undefined) return {status: 401, reason: String(x.unauthorized)};
                    }
                    throw x;
                }
                var out = {channels: state.channels, access: state.access, roles: state.roles,
                           expiry: state.expiry};
                state = null;
                return out;
            };
        })()
        """#
}
