-- fragment: session_end
-- When a console session ends whatever happens: :lifetime seconds after the login.
strftime('%Y-%m-%d %H:%M:%f', :now, '+' || :lifetime || ' seconds')

-- fragment: idle_since(column, seconds)
-- The instant in column is more than :seconds seconds before now.
{column} < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :{seconds} || ' seconds')
