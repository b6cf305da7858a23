import SetteeCore

/// The JavaScript that maps a batch of documents in one call (`MapRunner`), and the format of its answer.
///
/// One call of the driver runs every map function over every document of the batch: for each document in
/// order, for each view in order, the document's text is parsed with `JSON.parse` (afresh per view, as a
/// separate call with a `.json` argument used to: one view's changes to `doc` or `meta` never reach another)
/// and the function is called with it and the document's `meta`. `emit` is the driver's own JavaScript
/// function: it stringifies key and value at once (as the native `emit` did with `JSON.stringify`) and keeps
/// the texts until the call returns. Builtins the driver uses are captured before any user code runs, so a
/// map function that replaces `JSON`, `String` or `Date` changes what it sees, not how rows come back.
///
/// The answer is one string: a header line `<done>\t<view>` (documents completed, and the view in progress
/// of the next one, which says where a call stopped by the watchdog was), then one line per (document,
/// view) that emitted rows or failed, and one per document that is not JSON:
///
/// ```
/// r<doc>\t<view>\t<key>\t<value>\t<key>\t<value>...   rows, in emission order (key and value JSON text)
/// e<doc>\t<view>\t<message>                         the function threw; the message as a JSON string
/// b<doc>                                            JSON.parse refused the text (hand it over as base64)
/// ```
///
/// `JSON.stringify` escapes every control character, so JSON text never holds a raw tab or newline and the
/// lines split without quoting. A batch stops early, after a whole document, once it ran `budget`
/// milliseconds or its answer reached `maxLength` characters; the caller continues from `done`.
enum MapDriver {
    /// Evaluates to the driver: `driver(op, fns, docs, metas, parseDocs, budget, maxLength)`. `op` 1 maps
    /// `docs` (strings) with `fns` (functions); `metas` is a JSON array text of the documents' meta
    /// objects; `parseDocs` false hands the strings over as they are (base64 text). `op` 0 returns what the
    /// last call had gathered when it was stopped.
    static let source = #"""
        (function () {
            var global = this, parse = JSON.parse, stringify = JSON.stringify, now = Date.now, toText = String;
            var Err = Error, maxTexts = \#(2 * Limits.maxViewRowsPerDocument);
            var texts = [], out = "", done = 0, at = 0;
            global.emit = function (key, value) {
                if (texts.length >= maxTexts) {
                    throw new Err("Too many (" + (texts.length / 2 + 1) + ") keys emitted for document");
                }
                var k, v;
                try {
                    k = stringify(key);
                    v = stringify(value);
                } catch (e) {
                    throw new Err(toText(e));
                }
                texts[texts.length] = k === undefined ? "null" : k;
                texts[texts.length] = v === undefined ? "null" : v;
            };
            function answer() {
                var s = done + "\t" + at + "\n" + out;
                out = "";
                return s;
            }
            return function (op, fns, docs, metasText, parseDocs, budget, maxLength) {
                if (op === 0) return answer();
                out = "";
                done = 0;
                at = 0;
                var metas = [], start = now(), length = 0, n = docs.length, views = fns.length;
                for (var v = 0; v < views; v++) metas[v] = parse(metasText);
                for (var i = 0; i < n; i++) {
                    for (v = 0; v < views; v++) {
                        at = v;
                        var doc = docs[i];
                        if (parseDocs) {
                            try {
                                doc = parse(doc);
                            } catch (e) {
                                out += "b" + i + "\n";
                                break;
                            }
                        }
                        texts = [];
                        try {
                            fns[v](doc, metas[v][i]);
                        } catch (e) {
                            var m;
                            try {
                                m = toText(e);
                            } catch (e2) {
                                m = "exception";
                            }
                            out += "e" + i + "\t" + v + "\t" + stringify(m) + "\n";
                            continue;
                        }
                        if (texts.length > 0) {
                            var line = "r" + i + "\t" + v;
                            for (var j = 0; j < texts.length; j++) line += "\t" + texts[j];
                            out += line + "\n";
                            length += line.length;
                        }
                    }
                    texts = [];
                    done = i + 1;
                    at = 0;
                    if (length > maxLength || now() - start > budget) break;
                }
                return answer();
            };
        })()
        """#
}
