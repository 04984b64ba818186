# OpenMP 2.0, all MSVC's /openmp takes (tests/c/run_msvc.sh): every `#pragma omp`
# line (its continuations joined) made of the 2.0 directives and clauses
# (schedule static, dynamic, guided or runtime; no min or max reduction), and
# the loop under a `for` with a signed index declared in it, tested with < <=
# > >= and stepped by ++, --, += or -=.  Prints file:line: what, and exits 1.
function fail(msg) { printf "%s:%d: %s\n", FILENAME, start, msg; bad = 1 }
FNR == 1 { want_for = 0 }
want_for && /^[ \t]*for[ \t]*\(/ {
    if ($0 !~ /for \((ptrdiff_t|int|int64_t|long|long long) [A-Za-z_][A-Za-z_0-9]* = [^;]*; [A-Za-z_][A-Za-z_0-9]* (<|<=|>|>=) [^;]*; (\+\+|--)?[A-Za-z_][A-Za-z_0-9]*(\+\+|--| \+= | -= )?/)
        fail("the loop of an OpenMP for: not OpenMP 2.0's form (a signed index declared in it, < <= > >=, ++ -- += -=)")
    want_for = 0
    next
}
want_for && /^[ \t]*(\{|$)/ { next }
want_for && /^[ \t]*#/ && !/#pragma omp/ { next }
/^[ \t]*#[ \t]*pragma[ \t]+omp/ {
    start = FNR
    text = $0
    while (text ~ /\\[ \t]*$/ && (getline line) > 0) {
        sub(/\\[ \t]*$/, " ", text)
        text = text line
    }
    sub(/^[ \t]*#[ \t]*pragma[ \t]+omp[ \t]*/, "", text)
    # drop the clauses' arguments, nested parentheses included, keeping
    # those whose value matters: schedule's kind and reduction's operator
    t = text
    while (match(t, /schedule\([a-z]+/)) {
        kind = substr(t, RSTART + 9, RLENGTH - 9)
        if (kind !~ /^(static|dynamic|guided|runtime)$/) fail("schedule(" kind "): not in OpenMP 2.0")
        t = substr(t, RSTART + RLENGTH)
    }
    t = text
    while (match(t, /reduction\([ \t]*[^ \t:]+[ \t]*:/)) {
        op = substr(t, RSTART + 10, RLENGTH - 11)
        gsub(/[ \t]/, "", op)
        if (op !~ /^(\+|\*|-|&|\||\^|&&|\|\|)$/) fail("reduction(" op ":): not in OpenMP 2.0 (no min or max)")
        t = substr(t, RSTART + RLENGTH)
    }
    while (match(text, /\([^()]*\)/))
        text = substr(text, 1, RSTART - 1) " " substr(text, RSTART + RLENGTH)
    n = split(text, words, /[ \t,]+/)
    for (k = 1; k <= n; ++k) {
        w = words[k]
        if (w == "") continue
        if (w !~ /^(parallel|for|sections|section|single|master|critical|barrier|atomic|flush|ordered|threadprivate|private|firstprivate|lastprivate|shared|default|reduction|copyin|copyprivate|if|num_threads|schedule|nowait)$/)
            fail("`" w "`: not in OpenMP 2.0 (MSVC's /openmp)")
    }
    want_for = text ~ /(^|[ \t])for([ \t]|$)/
}
END { exit bad }
