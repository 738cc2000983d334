package ai.acc;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Reads the flat JSON objects libacc returns ({@code {"name": 123, "other": "cpu"}}: string keys,
 * integer or string values) into an ordered map of {@link Long} and {@link String} values, so the
 * binding needs no JSON library. Anything else is an {@link ErrorCode#INTERNAL} {@link AccException}.
 */
final class FlatJson {
  private final String s;
  private int i;

  private FlatJson(String s) {
    this.s = s;
  }

  static Map<String, Object> parse(String json) {
    FlatJson p = new FlatJson(json == null ? "" : json);
    Map<String, Object> out = new LinkedHashMap<>();
    p.expect('{');
    if (p.peek() == '}') {
      p.i++;
    } else {
      while (true) {
        String key = p.string();
        p.expect(':');
        out.put(key, p.peek() == '"' ? p.string() : p.integer());
        char c = p.next();
        if (c == '}') break;
        if (c != ',') throw p.error("',' or '}'");
      }
    }
    if (p.peek() != 0) throw p.error("the end");
    return out;
  }

  private char peek() {
    while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
    return i < s.length() ? s.charAt(i) : 0;
  }

  private char next() {
    char c = peek();
    if (c != 0) i++;
    return c;
  }

  private void expect(char c) {
    if (next() != c) throw error("'" + c + "'");
  }

  private String string() {
    expect('"');
    StringBuilder b = new StringBuilder();
    while (i < s.length()) {
      char c = s.charAt(i++);
      if (c == '"') return b.toString();
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (i >= s.length()) break;
      char e = s.charAt(i++);
      switch (e) {
        case '"', '\\', '/' -> b.append(e);
        case 'b' -> b.append('\b');
        case 'f' -> b.append('\f');
        case 'n' -> b.append('\n');
        case 'r' -> b.append('\r');
        case 't' -> b.append('\t');
        case 'u' -> {
          if (i + 4 > s.length()) throw error("four hex digits");
          try {
            b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
          } catch (NumberFormatException x) {
            throw error("four hex digits");
          }
          i += 4;
        }
        default -> throw error("an escape");
      }
    }
    throw error("'\"'");
  }

  private long integer() {
    peek();
    int start = i;
    if (i < s.length() && s.charAt(i) == '-') i++;
    while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
    try {
      return Long.parseLong(s.substring(start, i));
    } catch (NumberFormatException x) {
      i = start;
      throw error("an integer or a string");
    }
  }

  private AccException error(String expected) {
    return new AccException(
        ErrorCode.INTERNAL, "unexpected JSON from libacc at " + i + " (expected " + expected + "): " + s);
  }
}
