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
