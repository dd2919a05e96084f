// Numbers written as the Python generator writes them (alerts/alerting.py, alerts/recording.py),
// so the mixin renders the rules `python -m alerts` renders for the same configuration.
//
// Digits come from the double's exact binary value (mantissa * 2^exponent, expanded in base-1e7
// chunks), rounded half-even as Python's `format` rounds: std.format's %g and std.toString
// round through jsonnet's own decimal arithmetic and disagree with Python (0.3333 -> '0.333',
// 0.99 -> '0.98999999999999999'). tests/test_mixin.py compares each function with Python's.

local B = 10000000;  // chunk base; chunk * k stays below 2^53 for every k used here

// Little-endian base-B chunks of a non-negative integer.
local chunks(n, out=[]) = if n == 0 then out else chunks((n - n % B) / B, out + [n % B]);

// a * k for a small k (k * B < 2^53): every step is exact integer arithmetic on doubles.
local mulSmall(a, k) =
  local step(acc, d) =
    local v = d * k + acc.carry;
    { out: acc.out + [v % B], carry: (v - v % B) / B };
  local r = std.foldl(step, a, { out: [], carry: 0 });
  r.out + chunks(r.carry);

// a * base^n, in steps of base^step (base^step * B < 2^53). Each product's chunks are forced
// before the next step, or jsonnet's lazy thunks nest as deep as the steps are many.
local mulPow(a, base, n, step) =
  if n == 0 then a
  else
    local b = mulSmall(a, std.pow(base, std.min(n, step)));
    assert std.length([d for d in b if d < 0]) == 0;
    mulPow(b, base, n - std.min(n, step), step);

local pad7(d) = local s = std.toString(d); std.repeat('0', 7 - std.length(s)) + s;

local digitsOf(a) =
  local r = std.reverse(a);
  std.toString(r[0]) + std.join('', [pad7(r[i]) for i in std.range(1, std.length(r) - 1)]);

local stripZeros(s) =
  if std.length(s) > 1 && s[std.length(s) - 1] == '0' then stripZeros(std.substr(s, 0, std.length(s) - 1))
  else s;

// x > 0 as { digits, point }: x = 0.<digits> * 10^point exactly, digits without trailing zeros.
local exact(x) =
  local strip(m, e) = if e < 0 && m % 2 == 0 then strip(m / 2, e + 1) else { m: m, e: e };
  local me = strip(std.mantissa(x) * std.pow(2, 53), std.exponent(x) - 53);
  local n = if me.e >= 0 then mulPow(chunks(me.m), 2, me.e, 26) else mulPow(chunks(me.m), 5, -me.e, 12);
  local d = digitsOf(n);
  { digits: stripZeros(d), point: std.length(d) + std.min(me.e, 0) };

local increment(s) =  // a decimal digit string plus one
  if s == '' then '1'
  else
    local last = s[std.length(s) - 1];
    local head = std.substr(s, 0, std.length(s) - 1);
    if last == '9' then increment(head) + '0' else head + std.char(std.codepoint(last) + 1);

// At most p significant digits, rounded half-even (ties are exact: the digits are).
local round(n, p) =
  if std.length(n.digits) <= p then n
  else
    local head = std.substr(n.digits, 0, p);
    local first = n.digits[p];
    local odd = (std.codepoint(head[p - 1]) - 48) % 2 == 1;
    local up = first > '5' || (first == '5' && (std.length(n.digits) > p + 1 || odd));
    if !up then { digits: stripZeros(head), point: n.point }
    else
      local inc = increment(head);
      if std.length(inc) > p then { digits: stripZeros(std.substr(inc, 0, p)), point: n.point + 1 }
      else { digits: stripZeros(inc), point: n.point };

local fixed(n) =
  local d = n.digits;
  local p = n.point;
  if p <= 0 then '0.' + std.repeat('0', -p) + d
  else if p >= std.length(d) then d + std.repeat('0', p - std.length(d))
  else std.substr(d, 0, p) + '.' + std.substr(d, p, std.length(d) - p);

local scientific(n) =
  local x = n.point - 1;
  local mant = n.digits[0] + (if std.length(n.digits) > 1 then '.' + std.substr(n.digits, 1, std.length(n.digits) - 1) else '');
  local e = std.toString(if x < 0 then -x else x);  // std.abs(0) is -0
  mant + 'e' + (if x < 0 then '-' else '+') + (if std.length(e) < 2 then '0' + e else e);

// The shortest digits of x > 0 that read back as x (Python's repr, Go's shortest %g).
local shortest(x) =
  local n = exact(x);
  // (std.parseJson aborts on a number above the largest double)
  local reads(p) = local r = round(n, p);
                   r.point <= 308 && std.parseJson(scientific(r)) == x;
  // More digits are never farther from x, so the first p that reads back is found by
  // bisection (17 always does).
  local search(lo, hi) =
    if lo == hi then lo
    else local mid = std.floor((lo + hi) / 2);
         if reads(mid) then search(lo, mid) else search(mid + 1, hi);
  round(n, search(1, 17));

local signed(x, f) =
  if x == 0 then f(null, true)
  else if x < 0 then '-' + f(exact(-x), false)
  else f(exact(x), false);

{
  // Python's f'{x:.{p}g}'.
  g(x, p)::
    signed(x, function(n, zero)
      if zero then '0'
      else
        local r = round(n, std.max(p, 1));
        local e = r.point - 1;
        if -4 <= e && e < std.max(p, 1) then fixed(r) else scientific(r)),

  // Python's repr(float(x)): the shortest digits that read back as x.
  repr(x)::
    signed(x, function(n, zero)
      if zero then '0.0'
      else
        local r = shortest(std.abs(x));
        local e = r.point - 1;
        if -4 <= e && e < 16 then
          local f = fixed(r);
          if std.length(std.findSubstr('.', f)) == 0 then f + '.0' else f
        else scientific(r)),

  // alerts.recording.le_value: an integral number without a fraction, others as repr.
  num(x)::
    assert std.isNumber(x) : 'expected a number, got %s' % std.toString(x);
    if x == std.floor(x) then
      (if x < 0 then '-' else '') + (if x == 0 then '0' else fixed(exact(std.abs(x))))
    else self.repr(x),

  // alerts.alerting.human_duration: seconds as Prometheus's humanizeDuration writes them.
  duration(s)::
    assert std.isNumber(s) : 'expected seconds, got %s' % std.toString(s);
    if s < 1 then self.g(s * 1000, 4) + 'ms'
    else if s < 60 then self.g(s, 4) + 's'
    else
      local div(a, b) = (a - a % b) / b;
      local total = std.floor(s);
      local parts = [
        [div(total, 86400), 'd'],
        [div(total % 86400, 3600), 'h'],
        [div(total % 3600, 60), 'm'],
        [total % 60, 's'],
      ];
      local drop(ps) = if ps[0][0] == 0 then drop(ps[1:]) else ps;
      std.join(' ', [std.toString(p[0]) + p[1] for p in drop(parts)]),

  // alerts.recording.check_bucket_boundary: classic SLO thresholds must be bucket bounds; their
  // `le` regex.
  bucketBound(x, histogram, buckets)::
    assert std.length([b for b in buckets if std.abs(b - x) < 1e-12]) > 0 :
           'SLO threshold %s s is not a bucket boundary of %s; choose one of %s (or set nativeHistograms)'
           % [std.toString(x), histogram, std.toString(buckets)];
    self.leRegex(x),

  // alerts.recording.om_float: x as Prometheus 3 stores an `le` value (Go's shortest %g, `.0`
  // after an integer).
  omFloat(x)::
    assert std.isNumber(x) : 'expected a number, got %s' % std.toString(x);
    if x == 0 then '0.0'
    else
      local r = shortest(std.abs(x));
      local e = r.point - 1;
      local s = (if x < 0 then '-' else '') + (if -4 <= e && e < 6 then fixed(r) else scientific(r));
      if std.length(std.findSubstr('.', s)) == 0 && std.length(std.findSubstr('e', s)) == 0
      then s + '.0' else s,

  // alerts.recording.le_regex: both spellings of a bound, for `le=~`.
  leRegex(x)::
    local esc(s) = std.strReplace(std.strReplace(s, '.', '[.]'), '+', '[+]');
    local a = self.num(x);
    local b = self.omFloat(x);
    if a == b then esc(a) else esc(a) + '|' + esc(b),

  // What alerts.config.Config checks of the values that are not rule thresholds.
  checked(c)::
    assert std.isBoolean(c.nativeHistograms) : 'nativeHistograms must be true or false';
    assert (std.startsWith(c.runbookBase, 'https://') || std.startsWith(c.runbookBase, 'http://'))
           && std.length(std.findSubstr('#', c.runbookBase)) == 0 :
           "runbook base must be an absolute http(s) URL without '#', got %s" % c.runbookBase;
    c,
}
